#!/usr/bin/env python3
"""The fault-injection suite (RELIABILITY.md section b): every scenario on every policy it
applies to, repeated N times, and one table:

    scenario | policy | runs | passed | max detection s | blame correct | hangs

usage: suite.py BUILD_DIR [--runs N] [--only REGEX] [--seed S] [--passed-in TESTLOG]

Scenarios come from two places. Fault-job scenarios start tests/faults/fault_job the way users
start a job (in-process threads, mpirun, strata-run) with STRATA_FAULT set, a 2 s collective
deadline, and the fault at a random step; the suite itself checks the exit status, the time
from the fault to the end of the job, the message that must name the culprit, that no process
is left behind, and that no rank ever saw a wrong sum. The other scenarios are tests this
build already has (meson tests or single doctest cases), which check their own outcome and
blame; the suite runs them with the same outer deadline and counts hangs.
docs/faults.md says what each scenario covers.
"""
import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

T = 2.0          # the collective deadline every fault-job scenario runs with (seconds)
GRACE = 5.0      # RELIABILITY.md's G: every process gone within T + G of the fault
OUTER = 120.0    # a run still going after this is a hang
RANKS = 4
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}

# Who a survivor's message or the launcher blames (never the fault hook's own line).
def named(rank):
    return (rf"(process rank {rank}\b|Process name: \[\[\d+,\d+\],{rank}\]|MPI_ABORT was invoked on rank {rank}\b|rank {rank} (failed|was killed|exited|"
            rf"is no longer running|is stopped|has not arrived|did not arrive)|did not arrive: rank {rank}\b|"
            rf"\[strata\.collective\.aborted\] rank {rank}:|rank {rank} is gone)")


HOOK_LINE = re.compile(r"^(\[\d+\] )?\[strata\.fault\] rank \d+ step")  # the hook's own report


class Outcome:
    def __init__(self, ok, detect=None, blame=None, hang=False, why=""):
        self.ok, self.detect, self.blame, self.hang, self.why = ok, detect, blame, hang, why


def run_streaming(cmd, env, cwd=None):
    """Runs cmd with stdout+stderr merged; returns (rc, lines with arrival times, end time, hung)."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    lines, buf, hung = [], b"", False
    while True:
        left = OUTER - (time.monotonic() - start)
        if left <= 0:
            hung = True
            os.killpg(p.pid, signal.SIGKILL)
            break
        r, _, _ = select.select([p.stdout], [], [], min(left, 1.0))
        if r:
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            now = time.monotonic()
            *done, buf = buf.split(b"\n")
            lines += [(now, d.decode(errors="replace")) for d in done]
    rc = p.wait()
    end = time.monotonic()
    if buf:
        lines.append((end, buf.decode(errors="replace")))
    try:  # anything the job left in its session (a stopped rank, a stray child) is cleared here
        os.killpg(p.pid, signal.SIGKILL)
        leftovers = True
    except ProcessLookupError:
        leftovers = False
    return rc, lines, end, hung, leftovers


class FaultJob:
    """A fault_job run with STRATA_FAULT at a random step (or none)."""

    def __init__(self, policy, kind, rank=2, point="before_collective", debug=False, expect_blame=True,
                 min_detect=None, launcher_args=(), extra_env=None, flight=False):
        self.policy, self.kind, self.rank, self.point = policy, kind, rank, point
        self.debug, self.expect_blame, self.min_detect = debug, expect_blame, min_detect
        self.launcher_args, self.extra_env = list(launcher_args), extra_env or {}
        self.flight = flight  # every rank's flight-recorder file, and the diagnosis naming the skipped call

    def command(self, b, step):
        job = [b.fault_job, self.policy]
        if self.policy == "in_process":
            return job + ["--ranks", str(RANKS)]
        if self.policy == "mpi":
            return [b.mpirun, "-x", "STRATA_FAULT", "-x", "STRATA_COLLECTIVE_TIMEOUT", "-x", "STRATA_COLLECTIVE_DEBUG",
                    "-x", "STRATA_FLIGHT_RECORDER_DIR", "-np", str(RANKS)] + self.launcher_args + job
        return [b.strata_run, "-np", str(RANKS), "--grace", "2"] + self.launcher_args + ["--"] + job

    def __call__(self, b, rng):
        step = rng.randint(5, 50)
        flight_dir = tempfile.mkdtemp(prefix="strata-flight-suite-")
        env = {**os.environ, **MPI_ENV, **self.extra_env, "STRATA_COLLECTIVE_TIMEOUT": str(T),
               "STRATA_COLLECTIVE_DEBUG": "1" if self.debug else "0",
               "STRATA_FAULT": f"{self.rank};{step};{self.point};{self.kind}", "STRATA_FLIGHT_RECORDER_DIR": flight_dir}
        rc, lines, end, hung, leftovers = run_streaming(self.command(b, step), env)
        text = "\n".join(l for _, l in lines)
        fault_at = next((t for t, l in lines if HOOK_LINE.match(l)), None)
        detect = end - fault_at if fault_at is not None else None
        blame = None
        if self.expect_blame:
            pattern = re.compile(self.expect_blame if isinstance(self.expect_blame, str) else named(self.rank))
            blame = any(pattern.search(l) for _, l in lines if not HOOK_LINE.match(l))
        why = []
        if hung: why.append("hung")
        if rc == 0: why.append("the job exited 0")
        if fault_at is None: why.append("the fault never fired")
        if "WRONG RESULT" in text: why.append("a rank saw a wrong sum")
        if "finished" in text and self.point == "before_collective": why.append("a rank finished past the fault")
        if leftovers: why.append("processes left behind")
        if detect is not None and detect > T + GRACE: why.append(f"ended {detect:.1f} s after the fault")
        if detect is not None and self.min_detect is not None and detect < self.min_detect:
            why.append(f"ended {detect:.2f} s after the fault, before {self.min_detect} s")
        if blame is False: why.append("no message named the culprit")
        if self.flight:
            why += self.flight_problems(b, flight_dir, text)
        shutil.rmtree(flight_dir, ignore_errors=True)
        return Outcome(not why, detect, blame, hung, "; ".join(why) + ("\n" + "\n".join(text.splitlines()[-8:]) if why else ""))


    def flight_problems(self, b, flight_dir, text):
        """What is wrong with the flight recorder's account: a rank's file missing, or a diagnosis
        that does not name the rank that skipped and the sequence number of the call it skipped."""
        skipped = re.search(rf"rank {self.rank} skips allreduce #(\d+)", text)
        if not skipped:
            return ["the job did not say which call it skipped"]
        missing = [r for r in range(RANKS) if not os.path.exists(os.path.join(flight_dir, f"rank{r}.flight"))]
        got = subprocess.run([b.strata_info, "--diagnose", flight_dir], capture_output=True, text=True)
        want = rf"^rank {self.rank} never entered allreduce #{skipped.group(1)} \("
        why = [f"no flight-recorder file from rank{'s' if len(missing) > 1 else ''} {missing}"] if missing else []
        if not re.search(want, got.stdout, re.M):
            why.append(f"the diagnosis does not say /{want}/:\n{got.stdout}{got.stderr}")
        return why


class ExistingTest:
    """A meson test of this build, or one doctest case of a unit-test program."""

    def __init__(self, meson_test=None, program=None, case=None, should_fail=False, gloo_ranks=0):
        self.meson_test, self.program, self.case, self.should_fail = meson_test, program, case, should_fail
        self.gloo_ranks = gloo_ranks  # a doctest program of Gloo ranks, under strata-run

    def __call__(self, b, rng):
        if self.meson_test:
            t = b.meson_tests.get(self.meson_test)
            if t is None:
                return Outcome(False, why=f"this build has no meson test {self.meson_test}")
            if b.passed.pop(self.meson_test, False):  # run (and passed) by this build's meson test just now
                return Outcome(True, None, True, False)
            env = {**os.environ, **MPI_ENV, **(t.get("env") or {})}
            rc, lines, _, hung, _ = run_streaming(t["cmd"], env, cwd=t.get("workdir") or b.build)
            ok = (rc != 0) if self.should_fail else (rc == 0)  # meson's introspection leaves should_fail out
        else:
            exe = os.path.join(b.build, "tests", self.program)
            launch = [b.strata_run, "-np", str(self.gloo_ranks), "--"] if self.gloo_ranks else []
            rc, lines, _, hung, _ = run_streaming(launch + [exe, "--no-colors", f"--test-case={self.case}"],
                                                  dict(os.environ))
            text = "\n".join(l for _, l in lines)
            m = re.search(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed", text)
            ok = rc == 0 and m is not None and int(m.group(1)) >= 1 and m.group(1) == m.group(2)
        text = "\n".join(l for _, l in lines)
        return Outcome(ok and not hung, None, ok, hung, "" if ok else "\n".join(text.splitlines()[-8:]))


class ElasticKill:
    """B2 (elastic): 4 workers under strata-run --elastic 2:4 (tests/integration/run_elastic.sh),
    with drawn victims and steps: one SIGKILLed ("one"), two in succession ("two"), or one and
    then another while the survivors rebuild ("during_change"). The survivors take their next
    step within 2 s of each kill, bit-identical, every example once (for "one": from the step
    in flight). Detection: the slowest survivor's next step after a kill."""

    def __init__(self, kind="one"):
        self.kind = kind

    def __call__(self, b, rng):
        t = b.meson_tests.get("elastic_kill_one_of_four")
        if t is None:
            return Outcome(False, why="this build has no meson test elastic_kill_one_of_four")
        script, run, trainer = t["cmd"][0], t["cmd"][1], t["cmd"][2]
        first, second = rng.sample(range(4), 2)
        step = rng.randint(1, 25)
        if self.kind == "one":
            args = [str(first), str(step)]
        elif self.kind == "two":
            args = [f"{first}@{step},{second}@{step + rng.randint(1, 5)}", "2"]
        else:
            args = [f"{first}@{step},{second}@g2", "2"]
        rc, lines, _, hung, _ = run_streaming([script, run, trainer] + args, dict(os.environ),
                                              cwd=t.get("workdir") or b.build)
        text = "\n".join(l for _, l in lines)
        delays = [int(x) for x in re.findall(r"next step after the kill: .* \(max (\d+) ms", text)]
        delays += [int(x) for x in re.findall(r"the kill at \d+: .* (\d+) ms after it", text)]
        ok = rc == 0 and not hung and bool(delays)
        return Outcome(ok, max(delays) / 1000 if delays else None, ok, hung,
                       "" if ok else f"{' '.join(args)}, exit {rc}\n" + "\n".join(text.splitlines()[-8:]))


class PsDispatchedKill:
    """B4 (Async, dispatched batches): 1 server and 4 workers under strata-run --keep-going, a
    drawn worker SIGKILLed at a drawn step. The server drops it and hands the batches it held
    to the others; the job ends with every batch of the epoch completed once (the server's
    count), the survivors' steps and the victim's finished ones adding up to the epoch (or
    one more: the victim's last batch, trained again when its report was lost with it).
    Detection: from the kill to the server's report of the lost worker."""

    WORKERS, BATCHES = 4, 500

    def __call__(self, b, rng):
        t = b.meson_tests.get("parameter_server_gloo_fault_carry_on_dispatched")
        if t is None:
            return Outcome(False, why="this build has no meson test parameter_server_gloo_fault_carry_on_dispatched")
        exe = next(a for a in t["cmd"] if a.endswith("parameter_server_fault"))
        exe = exe if os.path.isabs(exe) else os.path.join(b.build, exe)
        victim, step = rng.randint(1, self.WORKERS), rng.randint(1, 40)
        env = {**os.environ, "STRATA_COLLECTIVE_TIMEOUT": str(T), "STRATA_PS_FAULT_VICTIM": str(victim),
               "STRATA_PS_FAULT_STEP": str(step)}
        cmd = [b.strata_run, "--keep-going", "-np", str(self.WORKERS + 1), "--", exe, "carry-on-dispatched", "gloo"]
        rc, lines, _, hung, leftovers = run_streaming(cmd, env)
        text = "\n".join(l for _, l in lines)
        fault_at = next((t for t, l in lines if HOOK_LINE.search(l)), None)
        lost_at = next((t for t, l in lines if f"worker rank {victim} is gone" in l), None)
        detect = lost_at - fault_at if fault_at is not None and lost_at is not None else None
        survivors = sum(int(n) for n in re.findall(r"rank \d+ finished the epoch \((\d+) steps here\)", text))
        why = []
        if hung: why.append("hung")
        if leftovers: why.append("processes left behind")
        if rc != 137: why.append(f"exit {rc}, not the killed rank's 137")
        if fault_at is None: why.append("the kill never happened")
        if lost_at is None: why.append("the server did not report the lost worker")
        if not re.search(rf"dispatched {self.BATCHES} batches: {self.BATCHES} completed, 0 again, [0-2] handed out again", text):
            why.append("the server did not count every batch completed once")
        # Every batch trained; the victim's last finished one twice when its report had not
        # reached the server (a Gloo message moves once the server asks for the next header).
        if survivors + step - 1 not in (self.BATCHES, self.BATCHES + 1):
            why.append(f"the survivors' {survivors} steps and the victim's {step - 1} are not the epoch's {self.BATCHES}")
        if detect is not None and detect > T + GRACE: why.append(f"reported {detect:.1f} s after the kill")
        return Outcome(not why, detect, lost_at is not None, hung,
                       f"victim {victim} step {step}: " + "; ".join(why) + "\n" + "\n".join(text.splitlines()[-8:]) if why else "")


class ListenerCheck:
    """E1: while a 2-rank Gloo job (TCP store) holds its connections, no socket it listens on
    is bound to a wildcard address."""

    def __call__(self, b, rng):
        env = dict(os.environ, STRATA_COLLECTIVE_TIMEOUT=str(T))
        cmd = [b.strata_run, "-np", "2", "--rendezvous", "tcp", "--", b.fault_job, "gloo", "--steps", "3",
               "--hold-ms", "1500"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        wildcard, listeners, deadline = set(), set(), time.monotonic() + 20
        while p.poll() is None and time.monotonic() < deadline:
            for addr, port, inode in listening_sockets():
                owners = socket_owners(inode, p.pid)
                if owners:
                    listeners.add((addr, port))
                    if addr in ("0.0.0.0", "::"):
                        wildcard.add((addr, port))
            time.sleep(0.1)
        hung = p.poll() is None
        if hung:
            os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
        ok = rc == 0 and not hung and listeners and not wildcard
        why = f"listeners {sorted(listeners)}, wildcard {sorted(wildcard)}, exit {rc}"
        return Outcome(ok, None, None, hung, "" if ok else why)


def listening_sockets():
    out = []
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            rows = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] != "0A":  # LISTEN
                continue
            hexaddr, hexport = f[1].split(":")
            if v6:
                addr = "::" if int(hexaddr, 16) == 0 else hexaddr
            else:
                addr = socket.inet_ntoa(bytes.fromhex(hexaddr)[::-1])
            out.append((addr, int(hexport, 16), f[9]))
    return out


def socket_owners(inode, session):
    owners = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.getsid(int(pid)) != session:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    owners.append(int(pid))
        except OSError:
            continue
    return owners


def scenarios():
    """(scenario, policy, check) for every scenario of the suite."""
    S = []
    for pol in ("mpi", "gloo"):
        S.append(("A1 sigkill mid-collective", pol, FaultJob(pol, "sigkill")))
    for kind in ("exit0", "exit1", "abort", "sigterm", "throw"):
        for pol in ("in_process", "mpi", "gloo") if kind == "throw" else ("mpi", "gloo"):
            S.append((f"A2 {kind}", pol, FaultJob(pol, kind)))
    S.append(("A3 stopped rank times out", "in_process", FaultJob("in_process", "stall", min_detect=T / 2)))
    for pol in ("mpi", "gloo"):
        S.append(("A3 stopped rank times out", pol, FaultJob(pol, "sigstop", min_detect=T / 2)))
    for pol in ("in_process", "mpi", "gloo"):
        S.append(("A4 rank skips a collective", pol, FaultJob(pol, "skip", min_detect=T / 2, flight=pol != "in_process")))
    for kind, field in (("shape", "count"), ("dtype", "dtype"), ("op", "op")):
        for pol in ("in_process", "mpi", "gloo"):
            S.append((f"A5 mismatch: {kind} (debug)", pol,
                      FaultJob(pol, kind, debug=True,
                               expect_blame=rf"\[strata\.collective\.mismatch\].*rank 2 called allreduce #\d+ \(.*\) at "
                                            rf"fault_job\.cpp:\d+.*differs in: {field}.*call sites: rank 0 fault_job\.cpp:\d+")))
    for pol in ("in_process", "mpi", "gloo"):  # without the fingerprint check: an error, never a wrong sum
        S.append(("A5 mismatch: count (no debug)", pol, FaultJob(pol, "shape", expect_blame=None)))
    S.append(("A6 abort unblocks waiting ranks", "in_process",
              ExistingTest(program="test_unit", case="Collective.InProcess.AbortReachesWaitingRanks")))
    S.append(("A6 abort unblocks waiting ranks", "gloo",
              ExistingTest(program="test_gloo", case="Collective.Gloo.AbortUnblocksAWaitingRank", gloo_ranks=RANKS)))
    for t in ("gloo_incomplete_rendezvous", "gloo_incomplete_rendezvous_tcp_store"):
        S.append(("A7 incomplete rendezvous", "gloo" if "tcp" not in t else "gloo (tcp store)", ExistingTest(t)))
    for pol, t in (("one_device", "resume_bitwise_one_device"), ("in_process (mirrored)", "resume_bitwise_mirrored"),
                   ("in_process (central storage)", "resume_bitwise_central_storage"),
                   ("mpi", "resume_bitwise_multi_worker_mirrored_mpi"),
                   ("gloo", "resume_bitwise_multi_worker_mirrored_gloo"),
                   ("mpi (parameter server sync)", "resume_bitwise_parameter_server_sync_mpi"),
                   ("mpi (parameter server sync, 2x3)", "resume_bitwise_parameter_server_sync_mpi_2servers_3workers"),
                   ("gloo (parameter server sync)", "resume_bitwise_parameter_server_sync_gloo")):
        S.append(("B1 kill, resume bitwise", pol, ExistingTest(t)))
    for pol, prefix in (("mpi", "parameter_server_fault_"), ("gloo", "parameter_server_gloo_fault_")):
        S.append(("B4 PS worker killed (Async)", pol, ExistingTest(prefix + "kill_worker")))
        S.append(("B4 PS worker stopped (Sync)", pol, ExistingTest(prefix + "stop_worker")))
        S.append(("B5 PS server killed", pol, ExistingTest(prefix + "kill_server")))
        S.append(("B5 PS server stopped", pol, ExistingTest(prefix + "stop_server")))
    S.append(("B4 PS worker killed, rest carry on", "gloo", ExistingTest("parameter_server_gloo_fault_carry_on")))
    S.append(("B4 PS 1 of 4 workers killed, its batches trained by the rest (Async, dispatched)", "gloo",
              PsDispatchedKill()))
    S.append(("B3 PS: two workers join at once, one killed after joining; a stranger refused", "gloo",
              ExistingTest("parameter_server_gloo_join")))
    S.append(("B3 PS: a worker joins a training Async job, every batch once", "gloo",
              ExistingTest("parameter_server_gloo_join_training_1servers_ok")))
    S.append(("B3 PS: a worker joins a training Async job of 2 servers", "gloo",
              ExistingTest("parameter_server_gloo_join_training_2servers_ok")))
    S.append(("B2/B3 PS: a joined worker killed, its batches trained by the rest", "gloo",
              ExistingTest("parameter_server_gloo_join_training_1servers_kill")))
    S.append(("B3 PS: a joiner past max_workers refused, named on both sides", "gloo",
              ExistingTest("parameter_server_gloo_join_training_1servers_full")))
    S.append(("B2 PS: below min_workers the job ends, naming who is left", "gloo",
              ExistingTest("parameter_server_gloo_join_training_1servers_below_min")))
    S.append(("B2 elastic: 1 of 4 workers killed, the rest go on", "gloo (elastic)", ElasticKill()))
    S.append(("B2 elastic: 2 of 4 killed in succession", "gloo (elastic)", ElasticKill("two")))
    S.append(("B2 elastic: a kill during a change", "gloo (elastic)", ElasticKill("during_change")))
    S.append(("B2 elastic: a loss in the middle of a rebuild's rendezvous", "gloo (elastic)",
              ExistingTest("elastic_loss_during_rebuild")))
    S.append(("B2 elastic: a stopped worker is dropped, refused on its return", "gloo (elastic)",
              ExistingTest("elastic_stop_comeback")))
    S.append(("B3 elastic: a worker joins", "gloo (elastic)", ExistingTest("elastic_join")))
    S.append(("D9/E2 elastic: a joiner without the job's token", "gloo (elastic)", ExistingTest("elastic_join_wrong_token")))
    S.append(("D9 elastic: a joiner of another wire version", "gloo (elastic)", ExistingTest("elastic_join_other_version")))
    S.append(("B2/B3 elastic membership", "runtime", ExistingTest("elastic_membership")))
    S.append(("B6 rank 0 (coordinator) killed", "mpi", FaultJob("mpi", "sigkill", rank=0)))
    S.append(("B6 rank 0 (coordinator) killed", "gloo (tcp store)",
              FaultJob("gloo", "sigkill", rank=0, launcher_args=["--rendezvous", "tcp"])))
    for scen, case in (("C1 crash during a checkpoint write", "Checkpoint.KilledWriterLeavesTheLastCompleteOne"),
                       ("C2 bit flips detected", "Checkpoint.EveryByteFlipIsDetected"),
                       ("C3 truncation typed", "Checkpoint.TruncationIsTyped"),
                       ("C5 newer format refused", "Checkpoint.NewerFormatIsRefused"),
                       ("C7 disk full, write errors", "Checkpoint.FullDiskIsAnIoErrorAndThePreviousSurvives"),
                       ("C7 disk full, write errors", "Checkpoint.WriteErrorsNameThePath"),
                       ("C8 other model or world size", "Checkpoint.RestoreRejectsAnotherModelOrWorld")):
        S.append((scen, "storage", ExistingTest(program="test_unit", case=case)))
    S.append(("C6 every rank saves, the chief writes", "mpi", ExistingTest("multi_worker_mirrored_mpi_np4")))
    S.append(("C6 every rank saves, the chief writes", "gloo", ExistingTest("multi_worker_mirrored_gloo_np4")))
    S.append(("C7 real full disk (tmpfs), every rank told", "gloo", ExistingTest("checkpoint_full_disk_gloo")))
    S.append(("C8 other model or world size", "trainer", ExistingTest("resume_refusals")))
    S.append(("C2/C3 damaged shard, other server count", "mpi (parameter server)",
              ExistingTest("resume_parameter_server_refusals")))
    S.append(("D1 malformed data files", "data", ExistingTest(program="test_unit", case="Data.Idx.RejectsBadFilesByName")))
    S.append(("D1 malformed data files", "data",
              ExistingTest(program="test_unit", case="Data.Idx.ReadsGzipAndRejectsTruncatedGzip")))
    S.append(("D1 malformed data files", "trainer", ExistingTest("example_cli_rejects_missing_data", should_fail=True)))
    for pol in ("mpi", "gloo"):
        S.append(("D1 one rank's data missing", pol, BadDataOnOneRank(pol)))
    S.append(("D2 uneven data per rank", "in_process", ExistingTest(program="test_unit", case="Strategy.Mirrored.EmptyReplicaBatch")))
    S.append(("D2+D3 uneven data, NaN on one rank", "mpi", ExistingTest("multi_worker_mirrored_mpi_np3")))
    S.append(("D2+D3 uneven data, NaN on one rank", "gloo", ExistingTest("multi_worker_mirrored_gloo_np3")))
    S.append(("D3 NaN on one rank", "in_process",
              ExistingTest(program="test_unit", case="Strategy.Mirrored.NonFiniteGradientsSkippedTogether")))
    S.append(("D4-D6 bad environment named", "runtime", ExistingTest(program="test_unit", case="Runtime.Process.BadEnvironmentIsNamed")))
    S.append(("D5 duplicate rank", "gloo", ExistingTest("gloo_duplicate_rank")))
    S.append(("D5 duplicate rank", "gloo (tcp store)", ExistingTest("gloo_duplicate_rank_tcp_store")))
    S.append(("D7 port already in use", "gloo (tcp store)", PortInUse()))
    S.append(("D8 unknown interface", "gloo", ExistingTest(program="test_gloo", case="Collective.Gloo.BadInterfaceListsTheAvailableOnes")))
    S.append(("D10 invalid call arguments", "in_process", ExistingTest(program="test_unit", case="Collective.InProcess.BadArgumentsAreNamed")))
    S.append(("D9 another wire version on one rank", "gloo", ExistingTest("gloo_build_skew")))
    S.append(("D9 another wire version on one rank", "gloo (tcp store)", ExistingTest("gloo_build_skew_tcp_store")))
    S.append(("E1 no wildcard listener", "gloo (tcp store)", ListenerCheck()))
    S.append(("E2 strangers on the store, job unharmed", "gloo (tcp store)", ExistingTest("hostile_store_clients")))
    for case in ("Runtime.TcpStore.RefusesAndNamesStrangers", "Runtime.TcpStore.IdleAndSlowConnectionsDoNotStopTheJob",
                 "Runtime.TcpStore.AClientRefusesAStoreWithoutTheToken"):
        S.append(("E2 strangers on the store", "runtime", ExistingTest(program="test_unit", case=case)))
    S.append(("E2 store parsers fuzzed", "runtime", Fuzz("store_protocol", "corpus_store_protocol")))
    S.append(("E3 malicious checkpoints", "storage", Fuzz()))
    for pol in ("mpi", "gloo"):
        S.append(("F1 rank slowed (CPU-throttled), named", pol, Straggler(pol, slowed=True)))
        S.append(("F2 healthy job, no straggler named", pol, Straggler(pol, slowed=False)))
    return S


class BadDataOnOneRank:
    """D1 across ranks: rank 1 of a 2-process MultiWorkerMirrored trainer cannot open its data
    (its --data names a directory that does not exist). It fails naming the file, and the job
    ends at once — well inside the 30 s deadline it runs with, so not by the deadline."""

    def __init__(self, policy):
        self.policy = policy

    def __call__(self, b, rng):
        args = ["--strategy", "multi_worker_mirrored", "--collective", self.policy, "--model", "mlp",
                "--max-steps", "20", "--no-eval", "--quiet"]
        bad = ["--data", "/nonexistent/fashion-mnist"]
        if self.policy == "mpi":
            cmd = [b.mpirun, "-np", "1", b.trainer] + args + [":", "-np", "1", b.trainer] + args + bad
        else:
            script = 'if [ "$STRATA_RANK" = 1 ]; then exec "$0" "$@" ' + " ".join(bad) + '; else exec "$0" "$@"; fi'
            cmd = [b.strata_run, "-np", "2", "--", "sh", "-c", script, b.trainer] + args
        env = {**os.environ, **MPI_ENV, "STRATA_COLLECTIVE_TIMEOUT": "30"}
        t0 = time.monotonic()
        rc, lines, end, hung, leftovers = run_streaming(cmd, env)
        text = "\n".join(l for _, l in lines)
        blame = "/nonexistent/fashion-mnist" in text and re.search(named(1), text) is not None
        ok = rc != 0 and not hung and not leftovers and blame and end - t0 < 10
        return Outcome(ok, end - t0, blame, hung, "" if ok else f"exit {rc}\n" + "\n".join(text.splitlines()[-8:]))


class Straggler:
    """F1/F2: which rank slows a healthy job. Two processes of the MultiWorkerMirrored trainer
    (the MLP), each pinned to a core of its own (taskset), with straggler windows of K = 20
    steps. slowed: rank 1 runs in a CPU-throttled cgroup (CFS bandwidth: 4 ms of CPU every 10
    ms, as a container with a CPU limit; cgroup v1's cpu controller or v2's cpu.max), or, where
    the suite cannot make one, beside a busy loop on its core; the first window (step 20) must
    name rank 1, and no window another rank. Not slowed: the same job alone; no window may name
    any rank. Both end with the JSON line's last window."""

    K, STEPS = 20, 100

    def __init__(self, policy, slowed):
        self.policy, self.slowed = policy, slowed

    @staticmethod
    def throttled_cgroup():
        """A new cgroup of 40 % of one CPU and the file that takes a pid into it, or None."""
        for root, quota in (("/sys/fs/cgroup/cpu", None), ("/sys/fs/cgroup", "cpu.max")):
            group = os.path.join(root, f"strata-straggler-{os.getpid()}")
            try:
                if quota is None and os.path.exists(os.path.join(root, "cpu.cfs_quota_us")):
                    os.makedirs(group, exist_ok=True)
                    open(os.path.join(group, "cpu.cfs_period_us"), "w").write("10000")
                    open(os.path.join(group, "cpu.cfs_quota_us"), "w").write("4000")
                    return group
                if quota and "cpu" in open(os.path.join(root, "cgroup.subtree_control")).read().split():
                    os.makedirs(group, exist_ok=True)
                    open(os.path.join(group, "cpu.max"), "w").write("4000 10000")
                    return group
            except OSError:
                shutil.rmtree(group, ignore_errors=True)
        return None

    def __call__(self, b, rng):
        args = [b.trainer, "--strategy", "multi_worker_mirrored", "--collective", self.policy, "--model", "mlp",
                "--max-steps", str(self.STEPS), "--no-eval", "--straggler-every", str(self.K)]
        var = "OMPI_COMM_WORLD_RANK" if self.policy == "mpi" else "STRATA_RANK"
        group = self.throttled_cgroup() if self.slowed else None
        hog = None
        into = f'[ "${var}" = 1 ] && echo $$ > {group}/cgroup.procs; ' if group else ""
        if self.slowed and not group:
            hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
        pin = ["sh", "-c", into + f'exec taskset -c "${var}" "$0" "$@"']
        cmd = ([b.mpirun, "-x", "STRATA_COLLECTIVE_TIMEOUT", "-np", "2"] if self.policy == "mpi"
               else [b.strata_run, "-np", "2", "--"]) + pin + args
        try:
            env = {**os.environ, **MPI_ENV, "STRATA_COLLECTIVE_TIMEOUT": "30"}
            t0 = time.monotonic()
            rc, lines, end, hung, leftovers = run_streaming(cmd, env)
        finally:
            if hog:
                hog.kill()
                hog.wait()
            if group:
                for _ in range(50):  # its processes have exited; the group goes once empty
                    try:
                        os.rmdir(group)
                        break
                    except OSError:
                        time.sleep(0.1)
        text = "\n".join(re.sub(r"^\[\d+\] ", "", l) for _, l in lines)  # strata-run's "[rank] " prefix off
        named_at = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"^step (\d+): slowest: rank (\d+),", text, re.M)]
        last = next((json.loads(l) for l in text.splitlines() if l.startswith("{") and '"stragglers"' in l), None)
        window = (last or {}).get("stragglers") or {}
        why = []
        if hung: why.append("hung")
        if rc != 0: why.append(f"exit {rc}")
        if leftovers: why.append("processes left behind")
        if not window: why.append("no straggler window in the JSON line")
        if self.slowed:
            if (self.K, 1) not in named_at: why.append(f"rank 1 not named at step {self.K}")
            if any(r != 1 for _, r in named_at): why.append(f"another rank named: {named_at}")
            if window and not (window.get("named") and window.get("slowest_rank") == 1):
                why.append(f"the last window does not name rank 1: {window}")
        elif named_at or window.get("named"):
            why.append(f"a healthy job named a straggler: {named_at} {window}")
        blame = (self.K, 1) in named_at if self.slowed else None
        how = " (throttled by a cgroup)" if group else " (beside a busy loop)" if hog else ""
        detail = f" (slowest {window.get('slowest_vs_others')}x the other{how})" if window else ""
        return Outcome(not why, end - t0, blame, hung,
                       "; ".join(why) + detail + ("\n" + "\n".join(text.splitlines()[-8:]) if why else ""))


class PortInUse:
    """D7: the rendezvous port is taken: the job fails at once, naming the port."""

    def __call__(self, b, rng):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        try:
            env = dict(os.environ, STRATA_COLLECTIVE_TIMEOUT=str(T))
            t0 = time.monotonic()
            rc, lines, end, hung, _ = run_streaming([b.strata_run, "-np", "2", "--rendezvous", "tcp", "--port", str(port),
                                                     "--", b.fault_job, "gloo", "--steps", "1"], env)
        finally:
            s.close()
        text = "\n".join(l for _, l in lines)
        blame = re.search(rf"{port}.*in use|in use.*{port}", text) is not None
        ok = rc != 0 and not hung and blame and end - t0 < T + GRACE
        return Outcome(ok, end - t0, blame, hung, "" if ok else f"exit {rc}\n" + "\n".join(text.splitlines()[-6:]))


class Fuzz:
    """E3 (with C4): the checkpoint reader, or (E2) the store's handshake and request parsers,
    under libFuzzer with ASan and UBSan, if this machine has the fuzzing build
    (tests/fuzz/run_fuzz.sh makes it; .ci/run runs it before the suite)."""

    def __init__(self, target="checkpoint_reader", corpus="corpus"):
        self.target, self.corpus = target, corpus

    def __call__(self, b, rng):
        exe = os.path.join(b.fuzz_dir, "fuzz_" + self.target)
        corpus = os.path.join(b.fuzz_dir, self.corpus)
        if not os.path.exists(exe):
            return Outcome(False, why=f"no fuzzing build at {b.fuzz_dir} (tests/fuzz/run_fuzz.sh SECONDS {b.fuzz_dir} {self.target})")
        rc, lines, _, hung, _ = run_streaming([exe, "-max_total_time=10", "-seed=%d" % rng.randint(1, 1 << 30),
                                               "-rss_limit_mb=2048", "-max_len=4096", "-timeout=10", corpus],
                                              dict(os.environ), cwd=b.fuzz_dir)
        text = "\n".join(l for _, l in lines)
        ok = rc == 0 and not hung and not re.search(r"ERROR: (libFuzzer|\w+Sanitizer)|runtime error:", text)
        return Outcome(ok, None, None, hung, "" if ok else "\n".join(l for _, l in lines[-8:]))


class Build:
    def __init__(self, build, fuzz_dir):
        self.build = os.path.abspath(build)
        self.fault_job = os.path.join(self.build, "tests", "fault_job")
        self.strata_run = os.path.join(self.build, "tools", "strata-run")
        self.strata_info = os.path.join(self.build, "tools", "strata-info")
        self.trainer = os.path.join(self.build, "examples", "fashion_mnist")
        self.mpirun = "mpirun"
        self.fuzz_dir = os.path.abspath(fuzz_dir)
        tests = json.loads(subprocess.run(["meson", "introspect", "--tests", self.build], capture_output=True,
                                          text=True, check=True).stdout)
        self.meson_tests = {t["name"]: t for t in tests}
        self.passed = {}  # meson tests already passed by this build's run (--passed-in)


def passed_tests(testlog):
    """The meson tests a testlog.json records as passed (OK, or an expected failure), by name."""
    passed = {}
    for line in open(testlog):
        t = json.loads(line)
        if t.get("result") in ("OK", "EXPECTEDFAIL"):
            passed[t["name"].split(" / ", 1)[-1]] = True
    return passed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--fuzz-dir", default="build-fuzz")
    ap.add_argument("--passed-in", default="", metavar="TESTLOG",
                    help="a meson testlog.json of this build: a scenario that is a meson test it passed counts "
                         "that run as its first (CI, right after the main suite), instead of running it again")
    a = ap.parse_args()
    b = Build(a.build, a.fuzz_dir)
    b.passed = passed_tests(a.passed_in) if a.passed_in else {}
    if not os.access(b.fault_job, os.X_OK):
        sys.exit(f"fault suite: {b.fault_job} is not built (meson compile -C {a.build} fault_job)")
    rng = random.Random(a.seed)
    print(f"fault suite: {a.runs} run(s) per scenario, seed {a.seed}, deadline T = {T:g} s, grace {GRACE:g} s", flush=True)
    rows, failed = [], 0
    for scen, pol, check in scenarios():
        if a.only and not re.search(a.only, f"{scen} {pol}"):
            continue
        outs = []
        for i in range(a.runs):
            o = check(b, rng)
            outs.append(o)
            if not o.ok:
                print(f"  FAILED {scen} | {pol} (run {i + 1}): {o.why}", flush=True)
        passed = sum(o.ok for o in outs)
        failed += a.runs - passed
        detects = [o.detect for o in outs if o.detect is not None]
        blames = [o.blame for o in outs if o.blame is not None]
        row = (scen, pol, str(a.runs), str(passed), f"{max(detects):.2f}" if detects else "-",
               f"{sum(blames)}/{len(blames)}" if blames else "-", str(sum(o.hang for o in outs)))
        rows.append(row)
        print("  " + " | ".join(row), flush=True)
    head = ("scenario", "policy", "runs", "passed", "max detection s", "blame correct", "hangs")
    width = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print()
    for r in [head, tuple("-" * w for w in width)] + rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |")
    total = len(rows) * a.runs
    print(f"\nfault suite: {total - failed} of {total} runs passed, {sum(int(r[6]) for r in rows)} hangs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
