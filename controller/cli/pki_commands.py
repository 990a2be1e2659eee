"""`railctl pki`: the fabric's certificates (railfabric.pki), offline.

    railctl pki init DIR                                  a CA: DIR/ca.crt, DIR/ca.key
    railctl pki issue DIR --switch tor-r1-b1 [--host 127.0.0.1]
    railctl pki issue DIR --controller 10.0.0.1 [--host ctl.example]
    railctl pki issue DIR --operator alice | --reader bob
    railctl pki issue DIR --etcd m1 --host 10.0.0.21     a member of the controllers' etcd

Rotation: issue again with --force (a new key and certificate under the same names), then
`systemctl reload` (or kill -HUP) the daemon that serves with it; clients pick new files up
when they next connect.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from railfabric import pki
from railfabric.tls import ETCD_NAME, Identity, Kind


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="pki_action", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="make a CA in DIR", formatter_class=p.formatter_class)
    init.add_argument("dir", type=Path, metavar="DIR")
    init.add_argument("--name", default="railfabric CA", help="the CA's common name")
    init.add_argument("--force", action="store_true", help="replace a CA already in DIR")
    issue = actions.add_parser(
        "issue",
        help="issue a certificate signed by DIR's CA",
        formatter_class=p.formatter_class,
    )
    issue.add_argument("dir", type=Path, metavar="DIR")
    who = issue.add_mutually_exclusive_group(required=True)
    who.add_argument("--switch", metavar="NAME", help="a switch: its agent and its target")
    who.add_argument(
        "--controller", metavar="HOST", help="the controller, serving on HOST (DNS name or IP)"
    )
    who.add_argument("--operator", metavar="NAME", help="an operator: may read and change")
    who.add_argument("--reader", metavar="NAME", help="a reader: may only read")
    who.add_argument(
        "--etcd",
        metavar="NAME",
        help="a member of the controllers' etcd cluster (--store etcds://): serving on its "
        f"--host addresses, and named {ETCD_NAME}, which controllers check",
    )
    issue.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="a DNS name or IP address the holder serves on (repeatable)",
    )
    issue.add_argument("--days", type=int, default=pki.LEAF_DAYS, help="validity in days")
    issue.add_argument("--force", action="store_true", help="replace existing files")


def run(args: argparse.Namespace) -> int:
    try:
        if args.pki_action == "init":
            cert = pki.init_ca(args.dir, name=args.name, force=args.force)
            print(f"CA {cert} (key {args.dir / pki.CA_KEY}, keep it offline)")
            return 0
        identity, hosts = _identity(args)
        issued = pki.issue(args.dir, identity, hosts, days=args.days, force=args.force)
    except pki.PkiError as err:
        print(f"railctl pki {args.pki_action}: {err}", file=sys.stderr)
        return 2
    print(f"{issued.identity}: {issued.cert} {issued.key}")
    return 0


def _identity(args: argparse.Namespace) -> tuple[Identity, list[str]]:
    if args.controller is not None:
        # A controller is reached by HOST: its certificate must name it for clients' checks.
        return Identity(Kind.CONTROLLER, args.controller), [args.controller, *args.host]
    for kind in (Kind.SWITCH, Kind.OPERATOR, Kind.READER, Kind.ETCD):
        name = getattr(args, kind.value)
        if name is not None:
            return Identity(kind, name), list(args.host)
    raise AssertionError("argparse requires one identity")


PKI_COMMANDS = [("pki", "make the fabric's CA and issue certificates", add_arguments, run)]
