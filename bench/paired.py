"""Paired runs: strata's side and its peer's alternately (A B A B ...), each printing one JSON
line, and the summary of the per-pair ratios of a figure."""
import statistics

from data_parallel import last_json


def run_pairs(strata_cmd, peer_cmd, pairs, env, peer_env=None):
    """The JSON lines of `pairs` alternating runs of each side; the peer runs in `peer_env`
    where given (data_parallel.peer_env), else in `env`."""
    s_runs, p_runs = [], []
    for _ in range(pairs):
        s_runs.append(last_json(strata_cmd, env))
        p_runs.append(last_json(peer_cmd, peer_env or env))
    return s_runs, p_runs


def ratio_summary(s_runs, p_runs, key="examples_per_s"):
    """The median, min and max over pairs of strata's `key` / the peer's."""
    ratios = [s[key] / p[key] for s, p in zip(s_runs, p_runs)]
    return {"ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3)}
