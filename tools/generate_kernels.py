"""Render the kernels' Tempita templates into the files they generate.

``python tools/generate_kernels.py`` writes every generated file;
``--check`` writes nothing and exits 1 if a checked-in file differs from
its template's rendering (tests/backends/native/kernels/test_generated.py
runs the same check).  The generated files are checked in, so a build needs
no step of its own; edit the template, then run this.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from Cython import Tempita

KERNELS = Path(__file__).resolve().parents[1] / "qops" / "backends" / "native" / "kernels"

# template -> [(generated file, the template's parameters)]
TEMPLATES = {
    # A micro-tile's pass over a panel, its accumulators unrolled: two
    # 256-bit vectors a row (AVX2, AVX-VNNI) or four 512-bit ones (AVX-512).
    "_tile_rows.pxi.tp": [("_tile_rows_256.pxi", {"width": 256}),
                          ("_tile_rows_512.pxi", {"width": 512})],
    # The tile epilogue's shortcut combinations, each a call with constant flags.
    "_tile_shortcuts.pxi.tp": [("_tile_shortcuts.pxi", {})],
    # The depthwise pair kernels' term loop at 128 (SSE2), 256 (AVX2) and 512
    # bits (AVX-512, VNNI where built with it).
    "include/qops_depthwise_terms.h.tp": [
        ("include/qops_depthwise_terms_sse2.h",
         {"width": 128, "isa": "sse2", "ISA": "SSE2", "label": "SSE2", "mm": "_mm",
          "vi": "__m128i", "si": "si128"}),
        ("include/qops_depthwise_terms_avx2.h",
         {"width": 256, "isa": "avx2", "ISA": "AVX2", "label": "AVX2", "mm": "_mm256",
          "vi": "__m256i", "si": "si256"}),
        ("include/qops_depthwise_terms_avx512.h",
         {"width": 512, "isa": "avx512", "ISA": "AVX512", "label": "AVX-512", "mm": "_mm512",
          "vi": "__m512i", "si": "si512"}),
    ],
    # The rest of the depthwise pair kernels' C at 128 bits (SSE2) and 256 bits
    # (AVX2); the AVX-512 kernel's masked stores are in _depthwise_avx512.pxi.
    "include/qops_depthwise.h.tp": [
        ("include/qops_depthwise_sse2.h",
         {"width": 128, "isa": "sse2", "ISA": "SSE2", "mm": "_mm", "vi": "__m128i",
          "vf": "__m128", "si": "si128"}),
        ("include/qops_depthwise_avx2.h",
         {"width": 256, "isa": "avx2", "ISA": "AVX2", "mm": "_mm256", "vi": "__m256i",
          "vf": "__m256", "si": "si256"}),
    ],
}


def rendered() -> dict[Path, str]:
    """Every generated file's path and the text its template renders."""
    files = {}
    for template, outputs in TEMPLATES.items():
        source = (KERNELS / template).read_text()
        for name, parameters in outputs:
            text = Tempita.Template(source, name=template).substitute(**parameters)
            files[KERNELS / name] = text
    return files


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a checked-in file differs from its rendering")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(str(path.relative_to(KERNELS)))
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print("generated files out of date: " + ", ".join(stale)
              + " (run python tools/generate_kernels.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
