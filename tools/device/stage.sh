#!/usr/bin/env bash
# Stage the GPU + AMX machine's wheels (../shared/device/stage.sh, with its arguments) and the
# project's runtime dependencies that list leaves out (platformdirs: the cost model's rate cache,
# which the first cupy product on a GPU other than the fitted one imports; dask-cuda: the
# multi-GPU example, whose own dependencies the machine's image has).
#   bash tools/device/stage.sh [pyscf | dask-cuda | PKG ...]
set -euo pipefail
top="$(git rev-parse --show-toplevel)"
bash "$top/../shared/device/stage.sh" "$@"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    -d "$top/.device/whl" "platformdirs>=3" "dask-cuda==26.10.0" 2>&1 | grep -v -i warning || true
ls "$top/.device/whl" | grep -i -e platformdirs -e dask_cuda
