"""The policies shipped with modelreg: package data, so an installed registry has them."""
