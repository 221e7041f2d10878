"""`posttrain studio [CONFIG] [--port N]`: build a config in a web page served on 127.0.0.1.

The page lists every section and key of the schema with its doc, type, default and allowed values,
checks the config with the CLI's validator as the user types (problems next to their keys), shows
what `posttrain config plan` prints for it, imports posttrain, verl, ROLL and Trinity-RFT files,
and exports the YAML and the `posttrain train` command. docs/studio.md describes it.
"""

from __future__ import annotations

import argparse
import os

from posttrain.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "studio",
        help="build a config in a local web page",
        description="Serve a page on 127.0.0.1 that builds a config from the schema, validates it and "
        "shows its batch plan as you type, imports posttrain/verl/ROLL/Trinity-RFT files, and exports "
        "the YAML and the `posttrain train` command. Ctrl-C stops it.",
    )
    p.add_argument("config", nargs="?", default=None, help="a config file to open (posttrain, verl, ROLL or Trinity-RFT)")
    p.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765; 0 picks a free one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from posttrain.cli.studio.server import StudioServer

    if args.config is not None and not os.path.isfile(args.config):
        raise UserError(f"{args.config}: config file not found")
    try:
        server = StudioServer(args.port, opened=args.config, cwd=os.getcwd())
    except OSError as err:
        raise UserError(f"cannot listen on 127.0.0.1:{args.port} ({err.strerror}): choose another --port, "
                        f"or --port 0 for a free one") from None
    print(f"posttrain studio: {server.url}  (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("posttrain studio: stopped", flush=True)
    finally:
        server.server_close()
    return 0
