#!/usr/bin/env bash
# Build qops' extensions with AddressSanitizer and UndefinedBehaviorSanitizer
# (float-cast-overflow included) in a scratch copy of the checkout, then run
# the test suite against that build.  Any sanitizer report fails the run.
#
#   tools/sanitize.sh                 # the default test run
#   tools/sanitize.sh tests/backends/native/kernels   # any pytest arguments
#
# Python itself is not instrumented: the ASan runtime is preloaded, and leak
# checking is off (the interpreter keeps its allocations until exit).
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git -C "$source_dir" ls-files -z | (cd "$source_dir" && xargs -0 cp --parents -t "$work")

flags="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
echo "sanitize: building in $work with $flags" >&2
(cd "$work" && CFLAGS="$flags" LDFLAGS="$flags" python setup.py -q build_ext --inplace >/dev/null)

# Make sure the instrumented build is the one that runs.
for library in "$work"/qops/backends/native/kernels/*.so "$work"/qops/backends/native/*.so; do
    if ! grep -q __asan_init "$library"; then
        echo "sanitize: $library is not instrumented" >&2
        exit 1
    fi
done

asan_runtime="$(${CC:-gcc} -print-file-name=libasan.so)"
ubsan_runtime="$(${CC:-gcc} -print-file-name=libubsan.so)"
export LD_PRELOAD="$asan_runtime $ubsan_runtime"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# ... and is the one Python imports (not an installed copy).
loaded="$(cd "$work" && PYTHONPATH="$work" python -c \
    'import qops.backends.native.kernels._platform as m; print(m.__file__)')"
case "$loaded" in
    "$work"/*) ;;
    *) echo "sanitize: the tests would import $loaded, not the instrumented build" >&2; exit 1 ;;
esac

# The tests that build extensions themselves would build uninstrumented
# copies; the resident-memory tests would measure ASan's allocator, whose
# quarantine keeps freed blocks (to catch their later use) by design.
cd "$work"
PYTHONPATH="$work" python -m pytest -q -p no:cacheprovider \
    --deselect tests/test_config.py::test_the_kernels_build_without_openmp \
    --deselect tests/test_config.py::test_a_debug_build_passes_the_kernel_tests \
    --deselect tests/test_threads.py::test_ten_thousand_calls_do_not_grow_the_process \
    "${@:-tests}"
