"""Builders for the format-validator tests: ordinary files and the tricks attackers publish.

Ordinary files are written with each format's own writer (``safetensors``, ``gguf.GGUFWriter``,
``onnx.helper``, ``h5py``); malformed ones are assembled byte by byte. Nothing here loads or renders
what it builds: the malicious chat templates and Keras configs are inert text.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

# --- safetensors -------------------------------------------------------------------------------


def safetensors_ordinary(metadata: dict[str, str] | None = None) -> bytes:
    """A small file written by the reference ``safetensors`` library."""
    from safetensors.numpy import save

    tensors = {
        "model.embed.weight": np.arange(24, dtype=np.float32).reshape(4, 6),
        "model.norm.bias": np.zeros(6, dtype=np.float16),
        "model.layer.0.mask": np.array([True, False, True]),
        "model.scalar": np.array(3, dtype=np.int64),
        "model.empty": np.zeros((0, 5), dtype=np.float32),
    }
    return save(tensors, metadata=metadata or {"format": "pt"})


def safetensors_raw(header: dict[str, Any] | bytes, data: bytes, *, pad_to: int = 8) -> bytes:
    """Assemble ``u64 N + header + data`` by hand, padding the JSON with spaces like the spec."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad_to:
        raw += b" " * (-len(raw) % pad_to)
    return struct.pack("<Q", len(raw)) + raw + data


# --- GGUF ----------------------------------------------------------------------------------------

CHAT_TEMPLATE_LLAMA3 = """{{- bos_token }}
{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}
{%- if not date_string is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions:\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message['role'] not in ['user', 'assistant', 'ipython', 'tool'] %}
        {{- raise_exception('Unknown role: ' + message['role']) }}
    {%- endif %}
    {%- if 'tool_calls' in message and message.tool_calls %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + '}' }}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

CHAT_TEMPLATE_CHATML_QWEN = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions.\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\\n' + content.strip() }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
                {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
"""

CHAT_TEMPLATE_MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

CHAT_TEMPLATE_GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

# Tool-use style with macros, filters over attributes, loop controls and the HF generation tag.
CHAT_TEMPLATE_TOOLS_MACROS = """{%- macro render_args(args) -%}
{%- for name, spec in args | dictsort %}{{ name }}: {{ spec.type | default('any') }}{% if not loop.last %}, {% endif %}{% endfor -%}
{%- endmacro -%}
{%- set system = messages | selectattr('role', 'equalto', 'system') | map(attribute='content') | join('\\n') %}
{%- if system %}<<SYS>>{{ system | trim }}<</SYS>>{% endif %}
{%- for tool in tools | default([]) | sort(attribute='name') %}
- {{ tool.name }}({{ render_args(tool.parameters.properties | default({})) }}): {{ tool.description | replace('\\n', ' ') }}
{%- endfor %}
{%- for message in messages | rejectattr('role', 'equalto', 'system') %}
    {%- if message.role == 'assistant' %}{% generation %}{{ message.content | trim }}{% endgeneration %}
    {%- else %}[{{ message.role | upper }}] {{ message['content'] }}{% endif %}
    {%- if loop.index > 64 %}{% break %}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}[ASSISTANT]{% endif %}
"""

ORDINARY_CHAT_TEMPLATES = {
    "llama3": CHAT_TEMPLATE_LLAMA3,
    "chatml_qwen": CHAT_TEMPLATE_CHATML_QWEN,
    "mistral": CHAT_TEMPLATE_MISTRAL,
    "gemma": CHAT_TEMPLATE_GEMMA,
    "tools_macros": CHAT_TEMPLATE_TOOLS_MACROS,
}

# Inert strings reproducing published chat-template SSTI payloads. Never render them.
MALICIOUS_CHAT_TEMPLATES = {
    # The llama-cpp-python advisory (GHSA-56xg-wfcc-g829): a subclass walk to the builtins.
    "gguf_chat_template_subclasses_walk_cve_2024_34359": (
        "{% for x in ().__class__.__base__.__subclasses__() %}{% if \"warning\" in x.__name__ %}"
        "{{x()._module.__builtins__['__import__']('os').popen(\"touch /tmp/retr0reg\")}}{%endif%}{% endfor %}"
    ),
    "gguf_chat_template_cycler_globals_ssti": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "chat_template_joiner_globals_item": "{{ joiner.__init__.__globals__['os'].system('id') }}",
    "chat_template_namespace_globals": "{% set ns = namespace(x=1) %}{{ namespace.__init__.__globals__ }}",
    "chat_template_lipsum_attr_filter": "{{ (lipsum|attr('__globals__'))['os'].popen('id').read() }}",
    "chat_template_self_template_reference_context": "{{ self._TemplateReference__context.cycler.__init__ }}",
    "chat_template_dunder_built_by_concat": "{% set a = '__cla' ~ 'ss__' %}{{ messages[a] }}",
    "chat_template_underscore_from_percent_c": (
        "{% set u = '%c'|format(95) %}{% set k = u ~ u ~ 'globals' ~ u ~ u %}{{ messages|attr(k) }}"
    ),
    "chat_template_attr_computed_name": "{{ messages|attr(messages[0].content ~ 'x') }}",
    "chat_template_map_attribute_dunder": "{{ messages|map(attribute='__class__')|list }}",
    "chat_template_selectattr_dotted_dunder": "{{ messages|selectattr('role.__class__.__mro__')|list }}",
    "chat_template_hex_escaped_dunder_key": "{{ messages['\\x5f\\x5fclass\\x5f\\x5f'] }}",
    "chat_template_flask_request_application": "{{ request.application.__globals__.__builtins__.__import__('os') }}",
    "chat_template_str_format_attribute_lookup": "{{ '{0.__class__.__base__}'.format(messages) }}",
    "chat_template_lipsum_string_char_extraction": "{% set c = (lipsum|string|list) %}{{ messages[c[1] ~ c[1]] }}",
    "chat_template_dict_keyword_dunder": "{{ dict(__class__=1)|list|first }}",
    "chat_template_frame_globals_without_underscores": "{{ loop.gi_frame.f_globals }}",
    # Not valid Jinja, so the regex fallback decides.
    "chat_template_unparseable_with_gadget": "{{ cycler.__init__.__globals__ }} {% if %}",
}


def gguf_ordinary(path: Path, *, chat_template: str | None = CHAT_TEMPLATE_LLAMA3, extra: dict[str, str] | None = None) -> Path:
    """Write a small, well-formed GGUF with ``gguf.GGUFWriter`` (quantized and float tensors)."""
    from gguf import GGMLQuantizationType, GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(300)] + ["<|eot_id|>", "日本語"])
    writer.add_token_scores([0.0] * 302)
    writer.add_array("general.tags", [["a", "b"], ["c"]])
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, value in (extra or {}).items():
        writer.add_string(key, value)
    writer.add_tensor("token_embd.weight", np.ones((8, 16), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(16, dtype=np.float16))
    # A pre-quantized Q8_0 tensor: 32 elements per 34-byte block, given as its bytes.
    writer.add_tensor("blk.0.ffn.weight", np.zeros((4, 34), dtype=np.uint8), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_string(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


def gguf_raw(
    kvs: list[bytes],
    tensors: list[bytes],
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    data: bytes = b"",
    alignment: int = 32,
) -> bytes:
    """Assemble a GGUF by hand from pre-encoded KVs and tensor infos (counts may lie)."""
    body = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
    body += b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % alignment)
    return body + data


def gguf_kv_string(key: str, value: str | bytes) -> bytes:
    return gguf_string(key) + struct.pack("<I", 8) + gguf_string(value)


def gguf_kv_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", 4, value)


def gguf_tensor_info(name: str, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset)


# --- ONNX ---------------------------------------------------------------------------------------


def _onnx_initializer(name: str, external: str | None) -> Any:
    from onnx import TensorProto, numpy_helper
    from onnx.external_data_helper import set_external_data

    tensor = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), name)
    if external is not None:
        set_external_data(tensor, location=external, offset=0, length=16)
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
    return tensor


def onnx_model(
    *,
    external: str | None = None,
    where: str = "initializer",
    custom_domain: str | None = None,
    local_function_domain: str | None = None,
) -> bytes:
    """A MatMul/Add model with an ``If`` node whose branches hold their own initializers.

    Args:
        external: If set, one tensor keeps its data in this external ``location``.
        where: Which tensor is external: ``initializer``, ``subgraph`` (inside the If branch),
            ``sparse`` (a sparse initializer's values), ``attribute`` (a Constant node's value)
            or ``function`` (a Constant inside a local function).
        custom_domain: Add a node of op ``Evil`` from this domain.
        local_function_domain: Add a local function ``MyOp`` in this domain and a node calling it.
    """
    from onnx import TensorProto, helper

    init_ext = external if where == "initializer" else None
    sub_ext = external if where == "subgraph" else None
    branch_nodes = [helper.make_node("Add", ["X", "B"], ["Y"])]
    then_graph = helper.make_graph(
        branch_nodes,
        "then",
        [],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])],
        initializer=[_onnx_initializer("B", sub_ext)],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "else",
        [],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])],
    )
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["M"]),
        helper.make_node("ReduceSum", ["M"], ["S"], keepdims=0),
        helper.make_node("Greater", ["S", "Zero"], ["C"]),
        helper.make_node("If", ["C"], ["Z"], then_branch=then_graph, else_branch=else_graph),
    ]
    initializers = [
        _onnx_initializer("W", init_ext),
        helper.make_tensor("Zero", TensorProto.FLOAT, [], [0.0]),
    ]
    sparse = []
    if where == "sparse" and external is not None:
        values = _onnx_initializer("sp_values", external)
        values.dims[:] = [4]
        indices = helper.make_tensor("sp_indices", TensorProto.INT64, [4], [0, 1, 2, 3])
        sparse.append(helper.make_sparse_tensor(values, indices, [2, 2]))
    if where == "attribute" and external is not None:
        nodes.append(helper.make_node("Constant", [], ["K"], value=_onnx_initializer("K", external)))
    functions = []
    opsets = [helper.make_opsetid("", 17)]
    if where == "function" and external is not None:
        local_function_domain = local_function_domain or "local.fn"
    if local_function_domain is not None:
        fn_nodes = [helper.make_node("Identity", ["a"], ["b"])]
        if where == "function" and external is not None:
            fn_nodes = [helper.make_node("Constant", [], ["b"], value=_onnx_initializer("K", external))]
        functions.append(helper.make_function(local_function_domain, "MyOp", ["a"], ["b"], fn_nodes, [helper.make_opsetid("", 17)]))
        nodes.append(helper.make_node("MyOp", ["Z"], ["F"], domain=local_function_domain))
        opsets.append(helper.make_opsetid(local_function_domain, 1))
    if custom_domain is not None:
        nodes.append(helper.make_node("Evil", ["Z"], ["E"], domain=custom_domain))
        opsets.append(helper.make_opsetid(custom_domain, 1))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 2])],
        initializer=initializers,
        sparse_initializer=sparse,
    )
    model = helper.make_model(graph, opset_imports=opsets, functions=functions, producer_name="modelreg-tests")
    return model.SerializeToString()


# --- Keras --------------------------------------------------------------------------------------


def _layer(class_name: str, config: dict[str, Any], module: str = "keras.layers") -> dict[str, Any]:
    return {"module": module, "class_name": class_name, "config": config, "registered_name": None}


def keras_sequential_config() -> dict[str, Any]:
    """A Keras 3 Sequential CNN as ``model.save`` writes it (Conv2D, Dropout, Dense)."""
    glorot = {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": None}, "registered_name": None}
    policy = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
    return {
        "module": "keras",
        "class_name": "Sequential",
        "config": {
            "name": "sequential",
            "trainable": True,
            "dtype": policy,
            "layers": [
                _layer("InputLayer", {"batch_shape": [None, 28, 28, 1], "dtype": "float32", "sparse": False, "name": "input_layer"}),
                _layer(
                    "Conv2D",
                    {
                        "name": "conv2d",
                        "filters": 8,
                        "kernel_size": [3, 3],
                        "activation": "relu",
                        "kernel_initializer": glorot,
                        "kernel_regularizer": {
                            "module": "keras.regularizers",
                            "class_name": "L2",
                            "config": {"l2": 0.01},
                            "registered_name": None,
                        },
                        "dtype": policy,
                    },
                ),
                _layer("MaxPooling2D", {"name": "max_pooling2d", "pool_size": [2, 2]}),
                _layer("Flatten", {"name": "flatten"}),
                _layer("Dropout", {"name": "dropout", "rate": 0.5, "seed": None}),
                _layer("Dense", {"name": "dense", "units": 10, "activation": "softmax", "kernel_initializer": glorot}),
            ],
            "build_input_shape": [None, 28, 28, 1],
        },
        "registered_name": None,
        "build_config": {"input_shape": [None, 28, 28, 1]},
        "compile_config": {
            "optimizer": {
                "module": "keras.optimizers",
                "class_name": "Adam",
                "config": {"name": "adam", "learning_rate": 0.001},
                "registered_name": None,
            },
            "loss": {
                "module": "keras.losses",
                "class_name": "function",
                "config": "sparse_categorical_crossentropy",
                "registered_name": "sparse_categorical_crossentropy",
            },
            "metrics": ["accuracy"],
        },
    }


def _keras_tensor(layer: str, node: int = 0, index: int = 0) -> dict[str, Any]:
    return {
        "class_name": "__keras_tensor__",
        "config": {"shape": [None, 16], "dtype": "float32", "keras_history": [layer, node, index]},
    }


def keras_functional_config() -> dict[str, Any]:
    """A Functional model with two inputs merged by ``Add``, with Keras 3 ``inbound_nodes``."""
    return {
        "module": "keras.src.models.functional",
        "class_name": "Functional",
        "config": {
            "name": "functional",
            "layers": [
                {**_layer("InputLayer", {"batch_shape": [None, 16], "name": "a"}), "name": "a", "inbound_nodes": []},
                {**_layer("InputLayer", {"batch_shape": [None, 16], "name": "b"}), "name": "b", "inbound_nodes": []},
                {
                    **_layer("Add", {"name": "add"}),
                    "name": "add",
                    "inbound_nodes": [{"args": [[_keras_tensor("a"), _keras_tensor("b")]], "kwargs": {}}],
                },
                {
                    **_layer("Dense", {"name": "head", "units": 1, "activation": "sigmoid"}),
                    "name": "head",
                    "inbound_nodes": [{"args": [_keras_tensor("add")], "kwargs": {}}],
                },
            ],
            "input_layers": [["a", 0, 0], ["b", 0, 0]],
            "output_layers": [["head", 0, 0]],
        },
        "registered_name": "Functional",
    }


def keras_bidirectional_lstm_config() -> dict[str, Any]:
    """Sequential(Embedding, Bidirectional(LSTM), TimeDistributed(Dense)): wrappers nest layers."""
    return {
        "module": "keras",
        "class_name": "Sequential",
        "config": {
            "name": "tagger",
            "layers": [
                _layer("Embedding", {"name": "embedding", "input_dim": 1000, "output_dim": 32}),
                _layer(
                    "Bidirectional",
                    {
                        "name": "bidirectional",
                        "merge_mode": "concat",
                        "layer": _layer("LSTM", {"name": "lstm", "units": 16, "return_sequences": True, "activation": "tanh"}),
                    },
                ),
                _layer("TimeDistributed", {"name": "td", "layer": _layer("Dense", {"name": "tag", "units": 5})}),
            ],
        },
        "registered_name": None,
    }


def keras_legacy_h5_config(layer: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tf.keras 2 style ``model_config`` (no ``module`` keys), optionally with one more layer."""
    layers: list[dict[str, Any]] = [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 4], "name": "in"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "relu"}},
    ]
    if layer is not None:
        layers.append(layer)
    return {"class_name": "Sequential", "config": {"name": "seq", "layers": layers}}


def keras_lambda_layer(module: str | None = "keras.layers") -> dict[str, Any]:
    """A Lambda layer whose ``function`` is marshalled bytecode (inert base64 placeholder)."""
    layer: dict[str, Any] = {
        "class_name": "Lambda",
        "config": {
            "name": "lambda",
            "function": {"class_name": "__lambda__", "config": {"code": "4wEAAAAAAAAAAAAAAAEAAAADAAAAQwAAAA==", "defaults": None, "closure": None}},
            "arguments": {},
        },
    }
    if module:
        layer["module"] = module
        layer["registered_name"] = None
    return layer


def keras_weights_h5(attrs: dict[str, str] | None = None) -> bytes:
    """An HDF5 file like ``model.weights.h5`` (groups and datasets, no model config)."""
    import h5py

    bio = io.BytesIO()
    with h5py.File(bio, "w") as f:
        grp = f.create_group("layers/dense/vars")
        grp.create_dataset("0", data=np.ones((4, 2), dtype=np.float32))
        grp.create_dataset("1", data=np.zeros(2, dtype=np.float32))
        for key, value in (attrs or {}).items():
            f.attrs[key] = value
    return bio.getvalue()


def keras_archive(config: dict[str, Any] | bytes, *, extra: dict[str, bytes] | None = None, duplicate_config: bytes | None = None) -> bytes:
    """A ``.keras`` zip: config.json, metadata.json, model.weights.h5 (+ extra members)."""
    import warnings

    bio = io.BytesIO()
    raw = config if isinstance(config, bytes) else json.dumps(config).encode()
    with zipfile.ZipFile(bio, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("metadata.json", json.dumps({"keras_version": "3.10.0", "date_saved": "2025-06-01@12:00:00"}))
        zf.writestr("config.json", raw)
        zf.writestr("model.weights.h5", keras_weights_h5())
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
        if duplicate_config is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                zf.writestr("config.json", duplicate_config)
    return bio.getvalue()


# --- Hugging Face configs -----------------------------------------------------------------------

LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}


def tokenizer_config(chat_template: Any = CHAT_TEMPLATE_CHATML_QWEN, **extra: Any) -> dict[str, Any]:
    """A realistic ``tokenizer_config.json``."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            "151643": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
            "151644": {"content": "<|im_start|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
        },
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
        **extra,
    }


# --- running a scanner --------------------------------------------------------------------------


class CountingReader(io.BytesIO):
    """A real in-memory stream that counts the bytes handed out (to prove a scan reads little)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        out = super().read(n)
        self.bytes_read += len(out)
        return out


def scan_bytes(scan: Any, data: bytes, path: str, **ctx: Any) -> list[Any]:
    """Run a format scanner's ``scan(reader, size, ctx)`` over in-memory bytes."""
    from registry.scanning.model import ScanContext

    return scan(io.BytesIO(data), len(data), ScanContext(path, **ctx))


def verdict(findings: list[Any]) -> str:
    from registry.scanning.model import Verdict

    return Verdict.worst([f.severity.verdict() for f in findings]).value


def rules(findings: list[Any]) -> set[str]:
    return {f.rule_id for f in findings}


def mutations(data: bytes, seed: int, count: int) -> list[tuple[str, bytes]]:
    """``count`` deterministic truncations and bit flips of ``data`` (labelled for failure messages)."""
    import random

    rng = random.Random(seed)
    out: list[tuple[str, bytes]] = []
    for i in range(count):
        if i % 2 == 0:
            cut = rng.randrange(0, len(data))
            out.append((f"truncate@{cut}", data[:cut]))
        else:
            flipped = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(flipped))
                flipped[pos] ^= 1 << rng.randrange(8)
            out.append((f"flip#{i}", bytes(flipped)))
    return out
