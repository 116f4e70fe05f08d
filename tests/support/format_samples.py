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
"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

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
"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

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
"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

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
"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

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


def gguf_ordinary(path: Path, *, chat_template: str | None = CHAT_TEMPLATE_LLAMA3,
                  extra: dict[str, str] | None = None) -> Path:
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
    body = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body += b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % alignment)
    return body + data


def gguf_kv_string(key: str, value: str | bytes) -> bytes:
    return gguf_string(key) + struct.pack("<I", 8) + gguf_string(value)


def gguf_kv_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", 4, value)


def gguf_tensor_info(name: str, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", ggml_type, offset))


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
        functions.append(helper.make_function(local_function_domain, "MyOp", ["a"], ["b"], fn_nodes,
                                              [helper.make_opsetid("", 17)]))
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
    glorot = {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": None},
              "registered_name": None}
    policy = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
    return {
        "module": "keras",
        "class_name": "Sequential",
        "config": {
            "name": "sequential",
            "trainable": True,
            "dtype": policy,
            "layers": [
                _layer("InputLayer",
                       {"batch_shape": [None, 28, 28, 1], "dtype": "float32", "sparse": False, "name": "input_layer"}),
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
                        "layer": _layer("LSTM",
                                        {"name": "lstm", "units": 16, "return_sequences": True, "activation": "tanh"}),
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
            "function": {"class_name": "__lambda__",
                         "config": {"code": "4wEAAAAAAAAAAAAAAAEAAAADAAAAQwAAAA==", "defaults": None, "closure": None}},
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


def keras_archive(config: dict[str, Any] | bytes, *, extra: dict[str, bytes] | None = None,
                  duplicate_config: bytes | None = None) -> bytes:
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
            "151643": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False,
                       "single_word": False, "special": True},
            "151644": {"content": "<|im_start|>", "lstrip": False, "normalized": False, "rstrip": False,
                       "single_word": False, "special": True},
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


# --- red-team round: more ordinary samples and the bypasses they sit beside ---------------------

CHAT_TEMPLATE_PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# DeepSeek-R1 style: namespace state machine, split on </think>, tool calls with tojson.
CHAT_TEMPLATE_DEEPSEEK = """{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}
{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}
{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}
{%- else %}{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}
{{ bos_token }}{{ ns.system_prompt }}
{%- for message in messages %}
{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}
{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool = false -%}
{%- for tool in message['tool_calls'] %}{%- if not ns.is_first %}{%- if message['content'] is none %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}
{%- endif %}{%- set ns.is_first = true -%}{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- endif %}{%- endfor %}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}
{%- endif %}
{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}
{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}
{%- endfor -%}
{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

# Hermes / Command-R style tool use: a recursive macro and a dict looked up by data keys.
CHAT_TEMPLATE_TOOLS_HERMES = """{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"} %}
{%- if basic_type_map[json_spec.type] is defined %}{{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}{{- "list[" +  json_to_python_type(json_spec|items) + "]" }}
{%- elif json_spec.type == "object" %}{%- if json_spec.additionalProperties is defined %}{{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']' }}{%- else %}{{- "dict" }}{%- endif %}
{%- elif json_spec.type is iterable %}{{- "Union[" }}{%- for t in json_spec.type %}{{- json_to_python_type({"type": t}) }}{%- if not loop.last %}{{- "," }}{%- endif %}{%- endfor %}{{- "]" }}
{%- else %}{{- "Any" }}{%- endif %}
{%- endmacro %}
{{- bos_token }}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># Safety Preamble
{%- for tool in tools %}
def {{ tool.name }}({% for param_name, param_fields in tool.parameter_definitions.items() %}{% if not loop.first %}, {% endif %}{{ param_name }}: {% if not param_fields.required %}Optional[{{ json_to_python_type(param_fields) }}] = None{% else %}{{ json_to_python_type(param_fields) }}{% endif %}{% endfor %}) -> List[Dict]:
    \"\"\"{{ tool.description }}\"\"\"
    pass
{%- endfor %}<|END_OF_TURN_TOKEN|>
{%- set roles = {"user": "<|USER_TOKEN|>", "assistant": "<|CHATBOT_TOKEN|>", "system": "<|SYSTEM_TOKEN|>"} %}
{%- for message in messages %}<|START_OF_TURN_TOKEN|>{{ roles[message.role] }}{{ message.content | trim }}<|END_OF_TURN_TOKEN|>{% endfor %}
{%- if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

# Mistral v0.3 tool calls: ``out[:-1]`` slices data, ``loop_messages[ns.index + 1]`` indexes with arithmetic.
CHAT_TEMPLATE_MISTRAL_TOOLS = """{%- set ns = namespace(index=0) %}
{%- set loop_messages = messages | rejectattr("role", "equalto", "system") | list %}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}{{- "[INST] " + message["content"] + "[/INST]" }}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}{{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}{%- set out = tool_call.function|tojson %}{{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}{{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}{%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}{%- if not loop.last %}{{- ", " }}{%- else %}{{- "]" + eos_token }}{%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}{{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool" %}{{- '[TOOL_RESULTS] {"content": ' + message.content|string + ', "call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- endif %}
    {%- if loop_messages[ns.index + 1] is defined and loop_messages[ns.index + 1].role == "tool" %}{%- set ns.index = ns.index + 1 %}{%- endif %}
{%- endfor %}"""  # noqa: E501 (a chat template kept verbatim: the scanners read its exact text)

MORE_ORDINARY_CHAT_TEMPLATES = {
    "phi3": CHAT_TEMPLATE_PHI3,
    "deepseek_r1": CHAT_TEMPLATE_DEEPSEEK,
    "hermes_command_r_tools": CHAT_TEMPLATE_TOOLS_HERMES,
    "mistral_v3_tools": CHAT_TEMPLATE_MISTRAL_TOOLS,
}

# Subscript keys assembled at render time: Jinja's ``obj[key]`` falls back to getattr. Never render.
KEY_ASSEMBLY_CHAT_TEMPLATES = {
    "chat_template_key_from_set_underscore": "{% set u = '_' %}{{ messages[u ~ u ~ 'class' ~ u ~ u] }}",
    "chat_template_key_from_for_literal": "{% for u in ['_'] %}{{ messages[u ~ u ~ 'class' ~ u ~ u] }}{% endfor %}",
    "chat_template_percent_c_via_variables": (
        "{% set p = '%' %}{% set f = p ~ 'c' %}{% set u = f|format(95) %}{% set k = u ~ u ~ 'class' ~ u ~ u %}"
        "{{ messages[k] }}"
    ),
    "chat_template_char_cut_from_constant": "{% set u = 'a_b'[1] %}{{ messages[u ~ u ~ 'class' ~ u ~ u] }}",
    "chat_template_char_cut_from_bos_token": "{% set u = bos_token[8] %}{{ messages[u*2 ~ 'class' ~ u*2] }}",
    "chat_template_namespace_field_underscore": "{% set ns = namespace(k='_') %}"
                                                "{{ messages[ns.k ~ ns.k ~ 'class' ~ ns.k ~ ns.k] }}",
    "chat_template_dict_field_underscore": "{% set d = dict(a='_') %}{{ messages[d.a ~ d.a ~ 'class' ~ d.a ~ d.a] }}",
    "chat_template_macro_argument_underscore": "{% macro g(u) %}{{ messages[u ~ u ~ 'class' ~ u ~ u] }}{% endmacro %}"
                                               "{{ g('_') }}",
    "chat_template_char_from_list_filter": "{% set u = ('x_'|list)[1] %}{{ messages[u~u~'class'~u~u] }}",
    "chat_template_map_attribute_from_variable": "{% set u = '_' %}{% set k = u ~ u ~ 'class' ~ u ~ u %}"
                                                 "{{ messages|map(attribute=k)|list }}",
}


def gguf_kv_string_array(key: str, values: list[str]) -> bytes:
    return gguf_string(key) + struct.pack("<IIQ", 9, 8, len(values)) + b"".join(gguf_string(v) for v in values)


def gguf_llama_realistic(path: Path, *, chat_template: str, big_endian: bool = False,
                         named_templates: dict[str, str] | None = None) -> Path:
    """A GGUF shaped like a converted Llama: BPE vocab, scores, token types, merges, rope/attention KVs."""
    from gguf import GGMLQuantizationType, GGUFEndian, GGUFWriter, TokenType

    writer = GGUFWriter(str(path), "llama", endianess=GGUFEndian.BIG if big_endian else GGUFEndian.LITTLE)
    writer.add_name("Tiny-Llama-3.2-Instruct")
    writer.add_type("model")
    writer.add_context_length(8192)
    writer.add_embedding_length(64)
    writer.add_block_count(1)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(7)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    tokens = [f"Ġt{i}" for i in range(250)] + ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "ĠĊ", "日本"]
    writer.add_token_list(tokens)
    writer.add_token_scores([float(-i) for i in range(len(tokens))])
    writer.add_token_types([TokenType.NORMAL] * 250 + [TokenType.CONTROL] * 3 + [TokenType.NORMAL] * 2)
    writer.add_token_merges(["Ġ t", "Ġt 1", "Ġt 2", "Ġ Ċ"])
    writer.add_bos_token_id(250)
    writer.add_eos_token_id(251)
    writer.add_add_bos_token(True)
    writer.add_chat_template(chat_template)
    for name, template in (named_templates or {}).items():
        writer.add_string(f"tokenizer.chat_template.{name}", template)
    if named_templates:
        writer.add_array("tokenizer.chat_templates", list(named_templates))
    writer.add_uint32("general.quantization_version", 2)
    # The writer byte-swaps native arrays itself for a big-endian file.
    writer.add_tensor("token_embd.weight", np.ones((255, 64), dtype=np.float16))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((64, 2 * 34), dtype=np.uint8),
                      raw_dtype=GGMLQuantizationType.Q8_0)
    writer.add_tensor("rope_freqs.weight", np.ones(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_vocab_only(path: Path) -> Path:
    """A tensorless GGUF like llama.cpp's ``ggml-vocab-*.gguf``."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>", "▁a"])
    writer.add_token_scores([0.0, 0.0, 0.0, -1.0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def safetensors_torch_all_dtypes() -> bytes:
    """``safetensors.torch.save`` over every dtype torch can store, scalars and zero-size tensors."""
    import torch
    from safetensors.torch import save

    tensors: dict[str, Any] = {}
    for name in (
        "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
        "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64", "complex64", "float8_e8m0fnu",
    ):
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        try:
            t = torch.zeros(3, 5, dtype=torch.float32).to(dtype)
            save({"probe": t})
        except Exception:  # noqa: BLE001 - this torch/safetensors pair cannot store it
            continue
        tensors[f"model.{name}.weight"] = t
    tensors["model.scalar"] = torch.tensor(1.5, dtype=torch.bfloat16)
    tensors["model.empty"] = torch.zeros(0)
    tensors["model.empty_3d"] = torch.zeros(3, 0, 2, dtype=torch.float16)
    return save(tensors, metadata={"format": "pt"})


def onnx_with_contrib_ops() -> bytes:
    """A transformer-ish graph as optimum/onnxruntime exports it: com.microsoft fused ops, ai.onnx.ml, a Loop body."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [4])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [4], [1.0] * 4)],
    )
    nodes = [
        helper.make_node("SkipLayerNormalization", ["X", "X", "gamma"], ["N"], domain="com.microsoft", epsilon=1e-5),
        helper.make_node("FastGelu", ["N"], ["G"], domain="com.microsoft"),
        helper.make_node("Loop", ["trip", "cond", "G"], ["L"], body=body),
        helper.make_node("Normalizer", ["L"], ["Y"], domain="ai.onnx.ml", norm="L2"),
    ]
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        initializer=[
            helper.make_tensor("gamma", TensorProto.FLOAT, [4], [1.0] * 4),
            helper.make_tensor("trip", TensorProto.INT64, [], [3]),
            helper.make_tensor("cond", TensorProto.BOOL, [], [True]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
              helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="onnxruntime.transformers").SerializeToString()


def onnx_save_with_external_data(directory: Path, *, location: str = "model.onnx_data") -> Path:
    """``onnx.save_model(..., save_as_external_data=True)``: the weights go to a sibling file."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(onnx_model())
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "W"))
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(directory / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return directory / "model.onnx"


def onnx_fields_reordered(model: bytes) -> bytes:
    """The same ModelProto with ``graph`` serialized before ``ir_version`` (protobuf allows any order)."""
    import onnx

    m = onnx.load_from_string(model)
    graph_first = onnx.ModelProto()
    graph_first.graph.CopyFrom(m.graph)
    rest = onnx.ModelProto(ir_version=m.ir_version)
    rest.opset_import.extend(m.opset_import)
    return graph_first.SerializeToString() + rest.SerializeToString()


HF_CONFIGS: dict[str, dict[str, Any]] = {
    "llama/config.json": LLAMA_CONFIG,
    "mistral/config.json": {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": 4096,
        "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None, "torch_dtype": "bfloat16",
        "vocab_size": 32768,
    },
    "qwen2/config.json": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_size": 896, "model_type": "qwen2",
        "rope_scaling": None, "use_sliding_window": False, "max_window_layers": 21, "tie_word_embeddings": True,
        "vocab_size": 151936,
    },
    "bert/config.json": {
        "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False,
        "hidden_act": "gelu", "model_type": "bert", "pad_token_id": 0, "position_embedding_type": "absolute",
        "type_vocab_size": 2,
    },
    "t5/config.json": {
        "architectures": ["T5ForConditionalGeneration"], "d_model": 512, "decoder_start_token_id": 0,
        "model_type": "t5",
        "task_specific_params": {
            "summarization": {"early_stopping": True, "length_penalty": 2.0, "max_length": 200,
                              "prefix": "summarize: "},
            "translation_en_to_de": {"max_length": 300, "num_beams": 4, "prefix": "translate English to German: "},
        },
    },
    "whisper/config.json": {
        "architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
        "begin_suppress_tokens": [220, 50257],
        "forced_decoder_ids": [[1, 50259], [2, 50359], [3, 50363]], "suppress_tokens": [1, 2, 7, 8, 9],
    },
    "whisper/preprocessor_config.json": {
        "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80, "hop_length": 160,
        "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right", "padding_value": 0.0,
        "processor_class": "WhisperProcessor", "return_attention_mask": False, "sampling_rate": 16000,
    },
    "clip/config.json": {
        "architectures": ["CLIPModel"], "model_type": "clip", "projection_dim": 512,
        "text_config": {"model_type": "clip_text_model", "bos_token_id": 0, "eos_token_id": 2},
        "vision_config": {"model_type": "clip_vision_model", "patch_size": 32, "image_size": 224},
    },
    "clip/preprocessor_config.json": {
        "crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
        "feature_extractor_type": "CLIPFeatureExtractor",
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "resample": 3, "size": 224,
    },
    "llama/generation_config.json": {"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128009],
                                     "temperature": 0.6, "top_p": 0.9},
    "sbert/modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ],
}


# --- red team, round 3 (tests/unit/scanning/test_redteam_round3.py) -------------------------------


def _pb_varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def _pb_field(number: int, wire: int, body: bytes = b"") -> bytes:
    key = _pb_varint(number << 3 | wire)
    if wire == 2:
        return key + _pb_varint(len(body)) + body
    return key + body


def onnx_sniff_dodges(location: str = "../../../etc/passwd") -> dict[str, bytes]:
    """ONNX models with external data escaping the directory, laid out to dodge a prefix sniffer.

    Each parses with ``onnx.load_model_from_string`` (protobuf skips unknown fields and groups in
    any order), so onnxruntime reads the external file.
    """
    import onnx

    evil = onnx_model(external=location)
    model = onnx.load_model_from_string(evil)
    graph = model.graph.SerializeToString()
    model.ClearField("graph")
    rest = model.SerializeToString()
    unknown_varints = _pb_field(99, 0, b"\x01") * 70
    return {
        "onnx_unknown_group_field_first": _pb_field(100, 3) + _pb_field(1, 0, b"\x01") + _pb_field(100, 4) + evil,
        "onnx_seventy_unknown_fields_first": unknown_varints + evil,
        "onnx_unknown_field_first_in_graph": rest + _pb_field(7, 2, _pb_field(99, 0, b"\x01") + graph),
        "onnx_long_doc_string_pushes_graph_past_prefix": (_pb_field(6, 2, b"d" * 200_000) + rest
                                                          + _pb_field(7, 2, graph)),
        "onnx_long_unknown_field_pushes_graph_past_prefix": _pb_field(50, 2, b"d" * 200_000) + evil,
    }


def sentencepiece_model_proto(pieces: int = 4000, trainer_first: bool = False) -> bytes:
    """A sentencepiece ``tokenizer.model``: a protobuf too, with no ``graph`` field 7."""
    body = b"".join(
        _pb_field(1, 2, _pb_field(1, 2, p.encode()) + _pb_field(2, 5, struct.pack("<f", -i / 10))
                  + (_pb_field(3, 0, b"\x02") if i == 0 else b""))
        for i, p in enumerate(["<unk>", "<s>", "</s>", *(f"\u2581w{i}" for i in range(pieces))])
    )
    trainer = _pb_field(2, 2,
                        _pb_field(1, 2, b"/tmp/corpus.txt") + _pb_field(2, 2, b"spm") + _pb_field(3, 0, b"\x01")
                        + _pb_field(4, 0, _pb_varint(16000)))
    normalizer = _pb_field(3, 2,
                           _pb_field(1, 2, b"nmt_nfkc") + _pb_field(2, 2, bytes(range(256)) * 4)
                           + _pb_field(3, 0, b"\x01"))
    return trainer + body + normalizer if trainer_first else body + trainer + normalizer


# Attribute names carried by the tokenizer's own strings: ``eos_token`` set to ``__class__`` (or
# ``__class__,__base__,...``) and a template that subscripts with it. Jinja's subscript falls back
# to getattr, so the template names nothing dangerous itself. Never render.
FILE_STRING_KEY_CHAT_TEMPLATES = {
    "chat_template_key_is_eos_token": "{{ ()[eos_token][bos_token] }}",
    "chat_template_keys_split_from_eos_token": "{% set p = eos_token.split(',') %}{{ ()[p[0]][p[1]][p[2]]()[p[3]] }}",
    "chat_template_namespace_walk_over_token_parts": (
        "{% set ns = namespace(o=()) %}{% for k in eos_token.split(',') %}{% set ns.o = ns.o[k] %}{% endfor %}"
        "{{ ns.o }}"
    ),
    "chat_template_map_attribute_from_token": "{{ messages|map(attribute=eos_token)|list }}",
    "chat_template_sort_attribute_from_token": "{{ messages|sort(attribute=additional_special_tokens[0])|first }}",
    "chat_template_key_from_token_in_a_block_set": "{% set x %}{{ eos_token }}{% endset %}{{ ()[x|trim] }}",
    "chat_template_key_loop_over_token_list": "{% for k in [bos_token, eos_token] %}{{ ()[k] }}{% endfor %}",
}


def keras_zip_after_text_with_junk_after_end_record() -> bytes:
    """Text, then a Lambda ``.keras`` archive, then bytes its end record's comment length does not cover.

    Python's zipfile (``zipfile.is_zipfile``, ``keras.saving.load_model``) takes the last end record
    of the final 64 KiB whatever follows it and corrects offsets for the prefix.
    """
    config = keras_sequential_config()
    config["config"]["layers"].append(keras_lambda_layer())
    return b"# notes\n" + keras_archive(config) + b"trailing junk"


def gguf_tar_polyglot(body: bytes) -> bytes:
    """A GGUF file whose one metadata string holds a tar: its first 512 bytes are a tar header too.

    ``gguf.GGUFReader`` reads a valid GGUF (one KV ``general.x``); ``tarfile`` reads members
    ``GGUF\\x03`` and ``storages``, which torch.load's legacy tar loader unpickles.
    """

    def header(prefix: bytes, size: int) -> bytes:
        h = bytearray(512)
        h[0 : len(prefix)] = prefix
        h[100:108] = b"0000644\x00"
        h[108:116] = b"0000000\x00"
        h[116:124] = b"0000000\x00"
        h[124:136] = b"%011o\x00" % size
        h[136:148] = b"00000000000\x00"
        h[156] = ord("0")
        h[148:156] = b" " * 8
        h[148:156] = b"%06o\x00 " % sum(h)
        return bytes(h)

    key = b"general.x"
    kv_prefix = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", 8)
    padded = body + bytes(-len(body) % 512)
    total = 512 + 512 + len(padded) + 1024
    first = header(kv_prefix + struct.pack("<Q", total - len(kv_prefix) - 8), 0)
    return first + header(b"storages", len(body)) + padded + bytes(1024)


def onnx_function_attribute_default_external(location: str = "../../../etc/passwd") -> bytes:
    """A local function whose default attribute value (``attribute_proto``) is an external tensor."""
    import onnx
    from onnx import helper

    model = onnx.load_model_from_string(onnx_model(local_function_domain="local.fn"))
    model.functions[0].attribute_proto.append(helper.make_attribute("k", _onnx_initializer("K", location)))
    return model.SerializeToString()


# A Lightning-style hparams.yaml whose value is built by calling a function (an unsafe YAML loader
# runs os.getcwd while reading). Never load it with anything but yaml.compose.
YAML_PYTHON_TAG_SAMPLES = {
    "yaml_python_object_apply_hparams": b"lr: 0.001\nbatch_size: 32\nmodel: !!python/object/apply:os.getcwd []\n",
    "yaml_python_tag_verbatim_form": b"lr: 0.001\nmodel: !<tag:yaml.org,2002:python/object/apply:os.getcwd> []\n",
    "yaml_python_name_tag": b"activation: !!python/name:os.getcwd ''\n",
}


def keras_h5_behind_large_user_block(user_block: int = 2 << 20) -> bytes:
    """A legacy Keras ``.h5`` with a Lambda layer behind a 2 MiB user block (h5py opens it)."""
    import h5py

    bio = io.BytesIO()
    with h5py.File(bio, "w", userblock_size=user_block) as f:
        f.attrs["model_config"] = json.dumps(keras_legacy_h5_config(keras_lambda_layer()))
    return bio.getvalue()


def onnx_graph_behind_many_unknown_fields(count: int = 120_000) -> bytes:
    """An escaping ONNX model behind more unknown fields than a sniffer walks (protobuf skips them)."""
    return _pb_field(99, 0, b"\x01") * count + onnx_model(external="../../../etc/passwd")


def hdf5_external_storage_and_link() -> dict[str, bytes]:
    """Keras-style ``.h5`` weights whose dataset data, or a link, points at files outside the model."""
    import h5py
    import numpy as np

    out = {}
    for kind in ("external_storage", "external_link"):
        bio = io.BytesIO()
        with h5py.File(bio, "w") as f:
            g = f.create_group("model_weights")
            g.create_dataset("dense/kernel", data=np.ones((2, 2), dtype="f4"))
            if kind == "external_storage":
                g.create_dataset("dense/bias", shape=(4,), dtype="u1", external=[("/etc/passwd", 0, 4)])
            else:
                g["dense/bias"] = h5py.ExternalLink("/root/secrets.h5", "/x")
        out[f"hdf5_{kind}_outside_the_model"] = bio.getvalue()
    return out
