"""`posttrain make-data` (being written)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("make-data".replace("config-cmd", "config"), help="(not written yet)")
    p.set_defaults(func=lambda args: print("not written yet") or 1)
