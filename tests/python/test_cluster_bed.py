"""tf_ext_train's workers on several hosts (tests/python/netbed.py: network namespaces joined by
veth links through a bridge, 198.18.0.0/15 and 2001:db8::/32 only, Debian-style /etc/hosts that
map each host's own name to 127.0.1.1 first): 2 and 3 hosts, by address, by host name and by
IPv6 address, give one process's per-step losses with the same global batch; each task listens
on its cluster address alone (the kernel's socket table: not on a second address of its host,
not on 127.0.1.1); a host whose own name resolves to loopback alone is refused at start-up naming
the answers; a peer that never starts ends the chief, and a chief that never starts or is
named by a wrong address ends its worker, within --collective_timeout + 10 s naming the task; a link pulled mid-training ends
every worker so, and the job restarted with --resume=auto goes on from the chief's last
checkpoint. Each case removes what it made, also when it fails (netbed.remove)."""
import os
import subprocess
import time

import numpy as np
import pytest

import netbed
from test_fit_distributed import BATCH, EPOCHS, N, TOOL, fingerprint, setup, step_losses

PORT = 7070
TIMEOUT = 10  # --collective_timeout in every case

def names(count):
    return [f"host{chr(ord('a') + i)}" for i in range(count)]


def task_flags(addresses, i):
    return [f"--cluster={','.join(addresses)}", f"--task_index={i}", f"--batch_size={BATCH}"]


def ended(proc, within):
    """(returncode, stderr) of a process that must end within `within` seconds."""
    try:
        _, stderr = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"still running {within} s on")
    return proc.returncode, stderr


def listening(bed, host, address):
    return netbed.wait_for(lambda: bed.connects(host, address, PORT), 90)


@pytest.mark.parametrize("hosts,how", [(2, "address"), (2, "name"), (3, "name"), (2, "ipv6"),
                                       (2, "ipv6 name"), (2, "dual-stack name")])
def test_hosts_train_as_one_process(tmp_path, hosts, how):
    """By name: the hosts files give the names IPv4 addresses, IPv6 ones, or both (then each task
    listens on its IPv4 address, as the kernel's socket table shows)."""
    flags = setup(tmp_path)
    one = subprocess.run([TOOL] + flags + [f"--batch_size={BATCH}", f"--history={tmp_path / 'one.csv'}"],
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    families = {"ipv6 name": ("v6",), "dual-stack name": ("v6", "v4")}.get(how, ("v4",))
    with netbed.Bed(names(hosts), families=families) as bed:
        if how.endswith("name"):
            addresses = [f"{h}:{PORT}" for h in bed.hosts]
        else:
            addresses = [f"[{bed.address(h, v6=True)}]:{PORT}" if how == "ipv6" else
                         f"{bed.address(h)}:{PORT}" for h in bed.hosts]
        def task(i):
            return bed.popen(bed.hosts[i], [TOOL] + flags + task_flags(addresses, i) +
                             [f"--history={tmp_path / f'h{i}.csv'}"])
        procs = [task(0)]
        if how.endswith("name"):  # the chief listens on one family's address, the peers not yet up
            v6 = how == "ipv6 name"
            assert listening(bed, "hostb", bed.address("hosta", v6=v6)), procs[0].communicate()[1]
            assert not bed.connects("hostb", bed.address("hosta", v6=not v6), PORT)
        procs += [task(i) for i in range(1, hosts)]
        results = [p.communicate(timeout=150) + (p.returncode,) for p in procs]
    for stdout, stderr, code in results:
        assert code == 0, stderr
    expected = step_losses(tmp_path / "one.csv")
    assert len(expected) == EPOCHS * N // BATCH
    np.testing.assert_allclose(step_losses(tmp_path / "h0.csv"), expected, rtol=1e-5, atol=1e-7)
    assert len({fingerprint(stdout) for stdout, _, _ in results}) == 1


def test_listens_on_its_cluster_address_alone_and_a_missing_peer_ends_it(tmp_path):
    """The chief's host has a second address; by host name, the chief listens on the one its
    peers know (and answers there), not on the second one nor on 127.0.1.1, its name's loopback
    answer. Its peer never starts: the chief ends within the timeout naming it."""
    flags = setup(tmp_path)
    with netbed.Bed(names(2)) as bed:
        bed.add_address("hosta", "198.18.1.1/24")
        addresses = [f"{h}:{PORT}" for h in bed.hosts]
        chief = bed.popen("hosta", [TOOL] + flags + task_flags(addresses, 0))
        assert listening(bed, "hostb", bed.address("hosta")), chief.communicate()[1]
        begun = time.time()
        assert not bed.connects("hosta", "198.18.1.1", PORT)
        assert not bed.connects("hosta", "127.0.1.1", PORT)
        assert not bed.connects("hosta", "127.0.0.1", PORT)
        code, stderr = ended(chief, TIMEOUT + 10)
    assert time.time() - begun < TIMEOUT + 10
    assert code != 0
    assert f"lost task worker 1 (hostb:{PORT})" in stderr, stderr


@pytest.mark.parametrize("chief", ["never starts", "wrong address"])
def test_worker_that_cannot_reach_its_chief(tmp_path, chief):
    """Refused (nothing listens) or no answer (an address of the link no host holds)."""
    flags = setup(tmp_path)
    with netbed.Bed(names(2)) as bed:
        addresses = [f"{h}:{PORT}" for h in bed.hosts]
        if chief == "wrong address":
            addresses[0] = f"198.18.0.99:{PORT}"
        worker = bed.popen("hostb", [TOOL] + flags + task_flags(addresses, 1))
        assert listening(bed, "hosta", bed.address("hostb")), worker.communicate()[1]
        begun = time.time()
        code, stderr = ended(worker, TIMEOUT + 10)
    assert time.time() - begun < TIMEOUT + 10
    assert code != 0
    why = "Connection refused" if chief == "never starts" else ""
    assert (f"task worker 1 (hostb:{PORT}) cannot reach the chief, task worker 0 ({addresses[0]}), "
            f"within {TIMEOUT} s: {why}") in stderr, stderr


def test_own_name_on_loopback_alone_is_refused(tmp_path):
    """A host whose /etc/hosts maps its own name to 127.0.1.1 alone cannot be reached by it."""
    flags = setup(tmp_path)
    with netbed.Bed(names(2), own_only=["hosta"]) as bed:
        addresses = [f"{h}:{PORT}" for h in bed.hosts]
        code, stderr = ended(bed.popen("hosta", [TOOL] + flags + task_flags(addresses, 0)), 60)
    assert code != 0
    assert (f"task worker 0 (hosta:{PORT}): cannot choose the address to listen on: host 'hosta' "
            "resolves to 127.0.1.1: none of them is an address of this machine other than loopback "
            "(127.0.1.1), where the other tasks, not all on loopback, cannot reach it (set option "
            "'listen_address' to the address to listen on)") in stderr, stderr


def test_partition_ends_every_worker_and_the_job_resumes(tmp_path):
    flags = setup(tmp_path) + [f"--checkpoint={tmp_path / 'ck' / 'ckpt'}"]
    flags = [f if not f.startswith("--epochs") else "--epochs=100000" for f in flags]
    with netbed.Bed(names(2)) as bed:
        addresses = [f"{h}:{PORT}" for h in bed.hosts]
        procs = [bed.popen(h, [TOOL] + flags + task_flags(addresses, i)) for i, h in enumerate(bed.hosts)]
        line, deadline = "", time.time() + 120
        while not line.startswith("epoch ") and time.time() < deadline:  # under way
            line = procs[0].stdout.readline()
            assert line or procs[0].poll() is None, procs[0].stderr.read()
        assert line.startswith("epoch ")
        bed.set_link("hostb", up=False)
        pulled = time.time()
        outcomes = [ended(p, TIMEOUT + 10) for p in procs]
        assert time.time() - pulled < TIMEOUT + 10
        for (code, stderr), other in zip(outcomes, ["hostb", "hosta"]):
            assert code != 0
            assert f"lost task worker {1 if other == 'hostb' else 0} ({other}:{PORT})" in stderr, stderr
        bed.set_link("hostb", up=True)
        import tensorflow as tf
        latest = tf.train.latest_checkpoint(str(tmp_path / "ck"))
        done = int(latest.rsplit("-", 1)[1]) if latest else 0
        flags = [f if not f.startswith("--epochs") else f"--epochs={done + 1}" for f in flags]
        procs = [bed.popen(h, [TOOL] + flags + task_flags(addresses, i) + ["--resume=auto"])
                 for i, h in enumerate(bed.hosts)]
        results = [p.communicate(timeout=150) + (p.returncode,) for p in procs]
    for stdout, stderr, code in results:
        assert code == 0, stderr
        assert "optimizer iterations: %d" % ((done + 1) * N // BATCH) in stdout
        assert len([l for l in stdout.splitlines() if l.startswith("epoch ")]) == 1
    assert len({fingerprint(stdout) for stdout, _, _ in results}) == 1


def test_nothing_is_left_behind():
    """Runs last in this file: every case above removed its namespaces, links and hosts files."""
    assert netbed.namespaces() == []
    assert netbed.links() == []
    assert not [n for n in os.listdir("/etc/netns") if n.startswith(netbed.PREFIX)] \
        if os.path.isdir("/etc/netns") else True
