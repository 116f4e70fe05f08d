"""License texts (``texts/``, from the SPDX License List) and matching a LICENSE file against them."""
