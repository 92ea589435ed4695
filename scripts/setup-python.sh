#!/bin/sh
# Installs the Python packages the oracle tests use (from PyPI), if missing.
# They are test tools only; the product is C.
python3 -c 'import numpy, gguf, tokenizers' 2>/dev/null && exit 0
python3 -m pip install --quiet --disable-pip-version-check numpy gguf tokenizers
