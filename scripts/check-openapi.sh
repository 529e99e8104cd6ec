#!/usr/bin/env bash
# Checks that docs/openapi.yaml is a valid OpenAPI 3.1 document, installing
# openapi-spec-validator (PyPI) first if python3 lacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c 'import openapi_spec_validator' 2>/dev/null; then
    # A Debian-managed python3 refuses plain pip installs (PEP 668).
    python3 -m pip install --quiet openapi-spec-validator ||
        python3 -m pip install --quiet --break-system-packages openapi-spec-validator
fi
python3 -m openapi_spec_validator docs/openapi.yaml
