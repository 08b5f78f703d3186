"""Hosts on one machine: an MPI job across a real network, made of network namespaces.

    with NamespaceHosts(4, rate="200mbit") as hosts:       # root only; Linux
        os.environ.update(hosts.environment)
        md.launch(fn, 4, backend="mpi", hostfile=hosts.hostfile,
                  mpiexec_args=hosts.mpiexec_args)

What it builds (every name carries this process's id, so two runs never meet):

1. **A switch**: a network namespace of its own holding a Linux bridge.
2. **Hosts** ``h0 .. h{N-1}``: a namespace each, with ``lo`` and one interface,
   ``mdnet0`` (:data:`INTERFACE`), one end of a veth pair whose other end is a
   port of the switch. Addresses ``.1 .. .N`` of a /24 the machine does not use
   (:func:`free_subnet` reads ``ip -o addr`` and ``ip route`` first). With ``rate``,
   each host sends at most that many bits per second and receives at most as
   many, as through a switch's full-duplex port (``tc qdisc ... tbf`` at both
   ends of its veth: a token bucket, kept small so that short messages pay the
   rate too; netem's delays are not available everywhere, a rate is).
3. **A launch node**: this namespace joins the switch as ``.254``, as a cluster's
   login node would: ``mpiexec`` runs here, every rank on a host.
4. **The launcher**: MPICH's hydra starts its proxy on a host with ``ssh HOST
   COMMAND``; ``-launcher ssh -launcher-exec SCRIPT`` makes it run ``SCRIPT HOST
   COMMAND`` instead, and the script (:data:`ENTER`) runs COMMAND in that host's
   namespace (``ip netns exec``). ``-localhost`` gives the proxies the launch
   node's address to call back.
5. **Only TCP between hosts.** MPICH's network module (UCX in the ``mpich``
   wheel) still sees processes of one machine, and would move their messages
   through shared memory, which namespaces do not separate: ``UCX_TLS=tcp,self``
   sends every message between ranks over TCP, on ``mdnet0``
   (``UCX_NET_DEVICES``): :attr:`NamespaceHosts.environment`.

Leaving the ``with`` (or :meth:`NamespaceHosts.close`) kills what still runs in
the namespaces and deletes them; their veths, and the launch node's, go with them.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

INTERFACE = "mdnet0"  # every host's one interface
LAUNCH_NODE = 254  # the launch node's last byte
BURST = "4kb"  # the token bucket: a few packets (tbf cuts larger GSO segments up)
QUEUE = "16mb"  # what may wait in the bucket's queue: no drops at the window TCP reaches

# $1 = the host's address (after ssh's options, which hydra adds: -x), then the proxy's
# command, which hydra quotes as one shell line
ENTER = """#!/bin/sh
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
case $host in
{cases}
  *) echo "no host $host here" >&2; exit 255;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


NEEDED = {12: "CAP_NET_ADMIN", 21: "CAP_SYS_ADMIN"}  # capability bits: links; ip netns's mounts


def available() -> str | None:
    """Why hosts cannot be made here (not root, a container without the capabilities,
    no ``ip``/``tc``), or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.M)
    have = int(found[1], 16) if found else 0
    lacking = [name for bit, name in NEEDED.items() if not have >> bit & 1]
    if lacking:
        return f"root without {' and '.join(lacking)} (a container's root?)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found (iproute2)" if missing else None


def run_ip(*words: str) -> str:
    """Run an ``ip``/``tc`` command; its output, or a RuntimeError quoting it and its error."""
    done = subprocess.run(words, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(words)} failed: {done.stderr.strip()}")
    return done.stdout


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has an address in or a route to."""
    found = re.findall(r"\binet (\S+)", run_ip("ip", "-o", "addr"))
    found += [line.split()[0] for line in run_ip("ip", "-4", "route").splitlines()
              if line and not line.startswith("default")]
    return [ipaddress.ip_network(text if "/" in text else text + "/32", strict=False)
            for text in found]


def free_subnet(used: list[ipaddress.IPv4Network], start: int = 0) -> ipaddress.IPv4Network:
    """The first 10.x.y.0/24 from the ``start``-th on that overlaps none of ``used``."""
    for k in range(start, start + 256 * 156):
        candidate = ipaddress.ip_network(f"10.{100 + k // 256 % 156}.{k % 256}.0/24")
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise RuntimeError("no free /24 in 10.100.0.0/10: every one is in use on this machine")


class NamespaceHosts:
    """``count`` hosts joined by one switch, each sending at most ``rate`` (``tc``'s
    spelling: "200mbit", "1gbit"; None: as fast as the machine moves them)."""

    def __init__(self, count: int, rate: str | None = None):
        if not 1 <= count < LAUNCH_NODE:
            raise ValueError(f"NamespaceHosts: need 1 to {LAUNCH_NODE - 1} hosts, got {count}")
        reason = available()
        if reason:
            raise PermissionError(f"NamespaceHosts: {reason}")
        tag = f"md{os.getpid():x}"
        self.switch = f"{tag}-switch"
        self.namespaces = [f"{tag}-h{i}" for i in range(count)]
        self.subnet = free_subnet(used_networks(), start=os.getpid() % 4096)
        self.addresses = [str(self.subnet[i + 1]) for i in range(count)]
        self.launch_address = str(self.subnet[LAUNCH_NODE])
        self.rate = rate
        self._uplink = f"{tag}l"  # the launch node's interface (15 characters at most)
        self._folder = Path(tempfile.mkdtemp(prefix="minidist-hosts-"))
        self.hostfile = self._folder / "hosts"
        self.launcher = self._folder / "enter"
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    @property
    def mpiexec_args(self) -> list[str]:
        """hydra's options that start each rank on its host, through :data:`ENTER`."""
        return ["-launcher", "ssh", "-launcher-exec", str(self.launcher),
                "-localhost", self.launch_address]

    @property
    def environment(self) -> dict[str, str]:
        """What the ranks' environment needs so that every message crosses ``mdnet0``."""
        return {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": INTERFACE}

    def _build(self) -> None:
        prefix = self.subnet.prefixlen
        # 1. the switch
        run_ip("ip", "netns", "add", self.switch)
        run_ip("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run_ip("ip", "-n", self.switch, "link", "set", "br0", "up")
        # 2. the hosts, each on a port of the switch
        for i, (ns, address) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
            run_ip("ip", "netns", "add", ns)
            self._plug(f"port{i}", ns, INTERFACE)
            run_ip("ip", "-n", ns, "addr", "add", f"{address}/{prefix}", "dev", INTERFACE)
            run_ip("ip", "-n", ns, "link", "set", "lo", "up")
            run_ip("ip", "-n", ns, "link", "set", INTERFACE, "up")
            if self.rate:  # both ways, as a full-duplex port: what leaves, what arrives
                for where, device in ((ns, INTERFACE), (self.switch, f"port{i}")):
                    run_ip("tc", "-n", where, "qdisc", "add", "dev", device, "root", "tbf",
                           "rate", self.rate, "burst", BURST, "limit", QUEUE)
        # 3. the launch node: this namespace, on the last port
        self._plug("uplink", None, self._uplink)
        run_ip("ip", "addr", "add", f"{self.launch_address}/{prefix}", "dev", self._uplink)
        run_ip("ip", "link", "set", self._uplink, "up")
        # 4. the launcher and the hostfile
        cases = "\n".join(f"  {address}) ns={ns};;"
                          for address, ns in zip(self.addresses, self.namespaces, strict=True))
        self.launcher.write_text(ENTER.format(cases=cases))
        self.launcher.chmod(0o755)
        self.hostfile.write_text("\n".join(self.addresses) + "\n")

    def _plug(self, port: str, ns: str | None, name: str) -> None:
        """A veth pair: ``port`` on the switch's bridge, ``name`` in ``ns`` (None: here)."""
        where = ["netns", ns] if ns else []
        run_ip("ip", "link", "add", name, *where, "type", "veth", "peer", "name", port,
               "netns", self.switch)
        run_ip("ip", "-n", self.switch, "link", "set", port, "master", "br0")
        run_ip("ip", "-n", self.switch, "link", "set", port, "up")

    def pids(self) -> list[int]:
        """Processes running in any of the hosts' namespaces."""
        return [pid for ns in self._existing() for pid in map(
            int, run_ip("ip", "netns", "pids", ns).split())]

    def sent_bytes(self) -> list[int]:
        """Bytes each host has sent on ``mdnet0`` so far."""
        return [int(run_ip("ip", "netns", "exec", ns, "cat",
                           f"/sys/class/net/{INTERFACE}/statistics/tx_bytes"))
                for ns in self.namespaces]

    def _existing(self) -> Iterator[str]:
        present = set(run_ip("ip", "netns", "list").split())
        return (ns for ns in [*self.namespaces, self.switch] if ns in present)

    def close(self) -> list[int]:
        """Kill what still runs in the namespaces, delete them; the pids it had to kill."""
        leftover = self.pids()
        for pid in leftover:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if re.search(rf"^\d+: {self._uplink}@", run_ip("ip", "-o", "link"), re.M):
            run_ip("ip", "link", "del", self._uplink)  # at once: the switch's end goes later
        for ns in self._existing():
            run_ip("ip", "netns", "del", ns)  # a namespace's veths go with it
        shutil.rmtree(self._folder, ignore_errors=True)
        return leftover

    def __enter__(self) -> NamespaceHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
