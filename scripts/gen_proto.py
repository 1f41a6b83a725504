#!/usr/bin/env python3
"""Generate the Python stubs for ``proto/partialflow.proto``: the one way they are made.

The .proto is copied into a temporary tree ``partialflow/proto/`` and compiled with ``-I``
at the tree's root, so the generated gRPC module imports its messages package-relatively
(``from partialflow.proto import partialflow_pb2``) and works from the installed package.

Usage: ``python scripts/gen_proto.py [--out DIR]`` (default: the repo's ``proto/``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO = REPO / "proto" / "partialflow.proto"
GENERATED = ("partialflow_pb2.py", "partialflow_pb2.pyi", "partialflow_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Compile the proto and write the generated files into ``out_dir``; returns their paths."""
    import grpc_tools
    from grpc_tools import protoc

    # Well-known types (google/protobuf/struct.proto) ship inside grpc_tools.
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        package_dir = root / "partialflow" / "proto"
        package_dir.mkdir(parents=True)
        shutil.copyfile(PROTO, package_dir / PROTO.name)
        build = root / "build"
        build.mkdir()
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={build}",
            f"--pyi_out={build}",
            f"--grpc_python_out={build}",
            f"partialflow/proto/{PROTO.name}",
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in GENERATED:
            target = out_dir / name
            shutil.copyfile(build / "partialflow" / "proto" / name, target)
            written.append(target)
        return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "proto", help="output directory")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
