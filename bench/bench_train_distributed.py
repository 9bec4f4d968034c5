"""Data-parallel tf_ext_train on one machine: two worker processes with --threads=1 each (a
cluster on loopback, 127.0.0.1, and the same two on two hosts of a test bed, by host name over
a veth link) against one process with --threads=2, on the MLP, CNN and ResNet-18 of
bench_train.py (its model builders), the same global --batch_size and .npz data.

    bench_train_distributed.py --tf_ext_train=BIN --library=SO --work=DIR [--out=DIR]
                               [--models=mlp,cnn,resnet18] [--steps=20] [--rounds=3]
                               [--no-two_hosts]

Per model and round, interleaved: the one process, the two workers, the two hosts, and the control: two
independent processes at the same time, each --threads=1 on half the global batch with no
cluster (each worker's own compute, on the same cores, without the all-reduce). Each figure is
the median over the rounds of the median steady-state step time tf_ext_train prints (the
chief's for the workers, the slower process's for the control). The all-reduce's share of a
worker's step is (workers - control) / workers: the all-reduce itself (the RPCs, the reduction)
and the wait for the slower worker, measured with and without it rather than from a trace.
The bytes all-reduced per step are the chief's start-up line ("all-reduce: N tensors in K
packs, B bytes a step"). A table, and with --out bench_train_distributed.json.
"""
import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import prepare_model  # noqa: E402  (the same models, built once, here)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from ports import free_ports  # noqa: E402  (the distributed tests' ports)
import netbed  # noqa: E402  (the distributed tests' multi-host test bed)


def base_command(tool, library, export, data, batch, threads):
    return [tool, "--library=" + library, "--saved_model=" + export, "--signature=train",
            "--data=" + data, "--inputs=x", "--targets=y",
            "--loss=sparse_categorical_crossentropy:from_logits", "--optimizer=adam",
            "--batch_size=%d" % batch, "--epochs=1", "--threads=%d" % threads]


def run_all(commands, timeout):
    """Runs the commands at the same time; their stdouts, in order."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for c in commands]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError("tf_ext_train failed: " + stderr[-2000:])
            out.append(stdout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


def median_ms(stdout):
    return float(re.search(r"median ([0-9.]+) ms per step", stdout).group(1))


def one_round(args, export, data, batch, bed):
    """(one process ms, workers ms, two hosts ms (None without a bed), control ms, the chief's
    all-reduce line's numbers)."""
    one = run_all([base_command(args.tf_ext_train, args.library, export, data, batch, 2)], args.timeout)[0]
    cluster = ",".join("127.0.0.1:%d" % p for p in free_ports(2))
    def worker(i, addresses):
        return base_command(args.tf_ext_train, args.library, export, data, batch, 1) + [
            "--cluster=" + addresses, "--task_index=%d" % i, "--collective_timeout=%d" % args.timeout]
    workers = run_all([worker(i, cluster) for i in range(2)], args.timeout)
    m = re.search(r"all-reduce: (\d+) tensors in (\d+) packs, (-?\d+) bytes a step", workers[0])
    hosts = None
    if bed is not None:  # the same two workers, each on a host of its own, by host name
        addresses = ",".join("%s:7070" % h for h in bed.hosts)
        hosts = run_all([["ip", "netns", "exec", bed.ns(h)] + worker(i, addresses)
                         for i, h in enumerate(bed.hosts)], args.timeout)
    control = run_all([base_command(args.tf_ext_train, args.library, export, data, batch // 2, 1)
                       for _ in range(2)], args.timeout)
    return (median_ms(one), median_ms(workers[0]), median_ms(hosts[0]) if hosts else None,
            max(median_ms(c) for c in control), [int(g) for g in m.groups()])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tf_ext_train", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--out", default="")
    p.add_argument("--models", default="mlp,cnn,resnet18")
    p.add_argument("--steps", type=int, default=20, help="global batches in the data (one epoch)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=int, default=600, help="seconds a run (and a collective) may take")
    p.add_argument("--two_hosts", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the two workers on two hosts of a test bed (network namespaces "
                        "joined by a veth link, tests/python/netbed.py; needs root)")
    args = p.parse_args(argv)
    if args.rounds < 3 or args.steps < 3:
        p.error("--rounds and --steps must be at least 3 (medians of the rounds, steady-state steps)")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    os.environ.setdefault("TF_EXT_LIBRARY", args.library)

    with contextlib.ExitStack() as stack:
        bed = stack.enter_context(netbed.Bed(["hosta", "hostb"])) if args.two_hosts else None
        rows = measure(args, bed)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_train_distributed.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def measure(args, bed):
    rows = []
    print("%-9s %5s  %12s  %12s  %12s  %12s  %14s  %9s  %9s"
          % ("model", "batch", "1 x 2 threads", "2 workers", "2 hosts", "control", "bytes/step",
             "all-reduce", "on hosts"), flush=True)
    for name in args.models.split(","):
        model, _, batch, export, data, _, _ = prepare_model(
            name, os.path.join(args.work, "distributed_" + name), args.steps)
        one, two, hosts, control, sizes = [], [], [], [], None
        for _ in range(args.rounds):
            a, b, h, c, sizes = one_round(args, export, data, batch, bed)
            one.append(a)
            two.append(b)
            hosts.append(h)
            control.append(c)
        row = {"model": name, "batch": batch, "steps": args.steps,
               "parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
               "one_process_2_threads_ms": statistics.median(one),
               "two_workers_1_thread_ms": statistics.median(two),
               "control_ms": statistics.median(control),
               "all_reduce_tensors": sizes[0], "all_reduce_packs": sizes[1], "all_reduce_bytes": sizes[2],
               "rounds": {"one_process_2_threads_ms": one, "two_workers_1_thread_ms": two,
                          "control_ms": control}}
        row["all_reduce_share"] = max(0.0, (row["two_workers_1_thread_ms"] - row["control_ms"])
                                      / row["two_workers_1_thread_ms"])
        on_hosts = float("nan")
        if bed is not None:
            row["two_hosts_1_thread_ms"] = statistics.median(hosts)
            row["rounds"]["two_hosts_1_thread_ms"] = hosts
            on_hosts = max(0.0, (row["two_hosts_1_thread_ms"] - row["control_ms"]) / row["two_hosts_1_thread_ms"])
            row["all_reduce_share_two_hosts"] = on_hosts
        rows.append(row)
        print("%-9s %5d  %9.2f ms  %9.2f ms  %9.2f ms  %9.2f ms  %14d  %8.1f%%  %8.1f%%"
              % (name, batch, row["one_process_2_threads_ms"], row["two_workers_1_thread_ms"],
                 row.get("two_hosts_1_thread_ms", float("nan")), row["control_ms"],
                 row["all_reduce_bytes"], 100 * row["all_reduce_share"], 100 * on_hosts), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
