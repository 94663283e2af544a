# Sourced by the device scripts (bash, repo root, $OUT and $t0 set): installs the project with
# the fused CUTLASS kernels into /tmp/emul_g (REUSE=1 keeps an earlier build there) and puts it
# first on PYTHONPATH; the build log goes to $OUT/build.log.
if [ -n "${REUSE:-}" ] && [ -d /tmp/emul_g/emulinalg ]; then
    echo "build: reusing /tmp/emul_g"
else
    CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 300 python3 -m pip install --no-build-isolation \
        --no-deps --target /tmp/emul_g . -C cmake.define.EMULINALG_CUDA_GEMM=ON \
        -C build-dir=/tmp/emul_g-build >"$OUT/build.log" 2>&1
    echo "build rc=$? $((SECONDS - t0)) s"
fi
export PYTHONPATH=/tmp/emul_g:${PYTHONPATH:-}
