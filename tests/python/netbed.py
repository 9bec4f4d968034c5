"""A multi-host test bed on one machine: each host a network namespace, all joined by veth links
to a bridge in a namespace of its own (the switch), with addresses from the benchmarking ranges
198.18.0.0/15 and 2001:db8::/32 only, and a Debian-style /etc/hosts per host (`ip netns exec`
mounts /etc/netns/NAME/hosts over /etc/hosts): the host's own name on 127.0.1.1 first, then
every host of the bed on its address.

Everything the bed makes is named with its prefix; making a bed first removes any leftover with
that prefix (a killed test cannot clean up), and leaving it (also on failure) removes what it
made and kills what still runs in its namespaces. Needs root."""
import os
import shutil
import subprocess
import time

PREFIX = "tfxbed"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def namespaces(prefix=PREFIX):
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix)]


def links(prefix=PREFIX):
    out = _ip("-br", "link", check=False).stdout
    return [line.split()[0].split("@")[0] for line in out.splitlines()
            if line.split() and line.split()[0].startswith(prefix)]


def remove(prefix=PREFIX):
    """Removes every namespace, link and hosts file named with `prefix`, and kills what runs in
    those namespaces."""
    for ns in namespaces(prefix):
        pids = _ip("netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", ns, check=False)
    for link in links(prefix):
        _ip("link", "del", link, check=False)
    if os.path.isdir("/etc/netns"):
        for name in os.listdir("/etc/netns"):
            if name.startswith(prefix):
                shutil.rmtree(os.path.join("/etc/netns", name), ignore_errors=True)


class Bed:
    """`hosts` names, e.g. ["hosta", "hostb"]: host i has 198.18.0.(i+1)/24 and 2001:db8::(i+1)/64
    on its eth0. `families`: the addresses the hosts files give the names ("v4", "v6" or both, a
    dual-stack host); `own_only`: hosts whose own /etc/hosts lists their name on 127.0.1.1 alone
    (as a machine that leaves its own name to DNS)."""

    def __init__(self, hosts, families=("v4",), own_only=(), prefix=PREFIX):
        self.hosts, self.prefix = list(hosts), prefix
        self.families, self.own_only = tuple(families), set(own_only)
        self.switch = f"{prefix}_sw"

    def ns(self, host):
        return f"{self.prefix}_{self.hosts.index(host)}"

    def address(self, host, v6=False):
        i = self.hosts.index(host) + 1
        return f"2001:db8::{i}" if v6 else f"198.18.0.{i}"

    def __enter__(self):
        remove(self.prefix)
        try:
            self._make()
        except BaseException:
            remove(self.prefix)
            raise
        return self

    def __exit__(self, *exc):
        remove(self.prefix)
        return False

    def _hosts_file(self, host):
        lines = ["127.0.0.1\tlocalhost", f"127.0.1.1\t{host}",
                 "::1\tlocalhost ip6-localhost ip6-loopback"]
        for other in self.hosts:
            if other == host and host in self.own_only:
                continue
            for family in self.families:
                lines.append(f"{self.address(other, v6=family == 'v6')}\t{other}")
        return "\n".join(lines) + "\n"

    def _make(self):
        _ip("netns", "add", self.switch)
        self.run_in(self.switch, ["ip", "link", "add", "br0", "type", "bridge"])
        self.run_in(self.switch, ["ip", "link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            ns, port = self.ns(host), f"{self.prefix}{i}"
            _ip("netns", "add", ns)
            # Made in the root namespace and moved at once: nothing of it stays there.
            _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", port, "netns", self.switch)
            self.run_in(self.switch, ["ip", "link", "set", port, "master", "br0", "up"])
            self.run_in(ns, ["ip", "link", "set", "lo", "up"])
            self.run_in(ns, ["ip", "addr", "add", f"{self.address(host)}/24", "dev", "eth0"])
            self.run_in(ns, ["ip", "addr", "add", f"{self.address(host, v6=True)}/64", "dev", "eth0",
                             "nodad"])
            self.run_in(ns, ["ip", "link", "set", "eth0", "up"])
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(self._hosts_file(host))

    def run_in(self, ns, argv):
        return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                              check=True)

    def add_address(self, host, cidr):
        """A second address on the host's eth0 (from 198.18.0.0/15 or 2001:db8::/32)."""
        self.run_in(self.ns(host), ["ip", "addr", "add", cidr, "dev", "eth0"] +
                    (["nodad"] if ":" in cidr else []))

    def popen(self, host, argv, env=None, **kwargs):
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host), *argv], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)

    def python(self, host, code):
        """Runs a short Python program on `host`; its stdout."""
        return self.run_in(self.ns(host), ["python3", "-c", code]).stdout

    def set_link(self, host, up):
        """Pulls (up=False) or plugs the host's cable: its port on the switch goes down or up."""
        port = f"{self.prefix}{self.hosts.index(host)}"
        self.run_in(self.switch, ["ip", "link", "set", port, "up" if up else "down"])

    def connects(self, host, address, port, timeout=2.0):
        """Whether a TCP connection from `host` to address:port opens."""
        family = "AF_INET6" if ":" in address else "AF_INET"
        code = (f"import socket\ns = socket.socket(socket.{family})\ns.settimeout({timeout})\n"
                f"print(s.connect_ex(({address!r}, {port})) == 0)")
        return self.python(host, code).strip() == "True"


def wait_for(predicate, timeout, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
