"""Bodies of the Hugging Face-compatible endpoint (``/hf``), in the Hub's own field names.

The Hub's wire format, not ours: camelCase fields (``blobId``, ``pointerSize``), and no field a client
might read as another protocol (never ``xetHash``: with it, ``huggingface_hub`` switches to Xet).
Kept apart from :mod:`api.schemas`, whose bodies follow modelreg's conventions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from registry.domain.files import MAX_PATH_LENGTH
from registry.services.hf import MAX_PATHS


class HfLfsPublic(BaseModel):
    """An LFS file in a tree listing: its sha256 (``oid``), size and the size of its LFS pointer."""

    oid: str = Field(description="sha256 of the file")
    size: int
    pointerSize: int


class HfTreeEntryPublic(BaseModel):
    type: Literal["file", "directory"]
    oid: str = Field(description="git blob sha1 of a plain file or of an LFS file's pointer; a folder's tree id")
    size: int
    path: str
    lfs: HfLfsPublic | None = Field(None, description="only for LFS files (weights, and files of 10 MiB or more)")


class HfSiblingLfsPublic(BaseModel):
    sha256: str
    size: int
    pointerSize: int


class HfSiblingPublic(BaseModel):
    rfilename: str
    size: int
    blobId: str
    lfs: HfSiblingLfsPublic | None = None


class HfCardDataPublic(BaseModel):
    license: str


class HfModelInfoPublic(BaseModel):
    id: str = Field(description="tenant/name")
    modelId: str
    author: str = Field(description="the tenant")
    sha: str = Field(description="the commit of the resolved version (40 hex)")
    lastModified: str | None = Field(description="when the version was sealed")
    private: bool
    disabled: bool
    gated: bool
    tags: list[str]
    cardData: HfCardDataPublic | None = None
    siblings: list[HfSiblingPublic]


class HfPathsInfoRequest(BaseModel):
    """What ``paths-info`` takes, as a form (what ``huggingface_hub`` sends) or as JSON."""

    model_config = ConfigDict(extra="ignore")

    paths: list[Annotated[str, Field(max_length=MAX_PATH_LENGTH)]] = Field(max_length=MAX_PATHS)
    expand: bool = False
