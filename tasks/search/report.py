"""A search's choice and reports: each setting's dev scores over its restarts (mean,
standard deviation, min, max), the setting with the best mean (`choose`), and what is
written of them into OUTPUT_DIR: results.json and results.md (every trial's dev and test
scores, each setting's spread, the choice and its best restart), dev_scores.png (each
restart's dev score by setting) and tensorboard/ (TensorBoard's HParams dashboard over the
trials).
"""

import json
import math
import os
import shutil

from bert_tf.base.files import atomic_write, replace_path, write_json
from tasks.search.plan import setting_label


def spread(values):
    """{"n", "mean", "std", "min", "max"} of `values` (std: the sample standard
    deviation, n - 1 in the denominator; 0 for one value); None for no values."""
    if not values:
        return None
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "mean": mean, "std": std, "min": min(values), "max": max(values)}


def test_metric(metric):
    """The test score's name of a dev score's (score_test's keys)."""
    return "test_" + metric.removeprefix("eval_")


def _best(items, key, direction):
    """The first of `items` with the best key (max or min): ties go to the earlier."""
    best = None
    for item in items:
        if best is None or (key(item) > key(best) if direction == "max"
                            else key(item) < key(best)):
            best = item
    return best


def choose(plan, trials, dev):
    """The search's results before the test set: trials ({trial id: (setting, restart)}),
    dev ({trial id: dev scores}) -> {"settings": [per setting in grid order: its trials
    in restart order and the spread of plan.metric], "chosen": the setting with the best
    mean (ties: the earlier), its trials and best restart}."""
    settings = []
    for index, setting in enumerate(plan.settings):
        ids = sorted((tid for tid, (s, _) in trials.items() if s == setting),
                     key=lambda tid: trials[tid][1])
        settings.append({"index": index, "setting": setting, "trials": ids,
                         "dev": spread([dev[tid][plan.metric] for tid in ids])})
    chosen = _best(settings, lambda s: s["dev"]["mean"], plan.direction)
    best = _best(chosen["trials"], lambda tid: dev[tid][plan.metric], plan.direction)
    return {"settings": settings,
            "chosen": {"index": chosen["index"], "setting": chosen["setting"],
                       "trials": chosen["trials"], "best_trial": best}}


def results(plan, trials, dev, seconds, choice, test=None, test_file=None, runs=None,
            export=None):
    """results.json's content."""
    test = test or {}
    metric_test = test_metric(plan.metric)
    rows = [{"trial": tid, "setting": setting, "restart": restart,
             "seed": plan.restart_seed(restart), "run_dir": (runs or {}).get(tid),
             "seconds": seconds.get(tid), "dev": dev[tid], "test": test.get(tid)}
            for tid, (setting, restart) in sorted(trials.items())]
    settings = [dict(s, test=spread([test[t][metric_test] for t in s["trials"]
                                     if t in test and metric_test in test[t]]))
                for s in choice["settings"]]
    chosen = dict(choice["chosen"], dev=settings[choice["chosen"]["index"]]["dev"],
                  test=settings[choice["chosen"]["index"]]["test"],
                  run_dir=(runs or {}).get(choice["chosen"]["best_trial"]))
    return {"family": plan.family, "command": f"python -m {plan.command}",
            "metric": plan.metric, "direction": plan.direction,
            "test_metric": metric_test if test_file else None,
            "grid": [[n, list(v)] for n, v in plan.grid], "restarts": plan.restarts,
            "seeds": [plan.restart_seed(r) for r in range(plan.restarts)],
            "test_file": test_file, "trials": rows, "settings": settings,
            "chosen": chosen, "export": export}


def _pm(s, digits=4):
    return "-" if not s else f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def markdown(report):
    """results.md: the settings' spreads, every trial's scores, the choice."""
    metric, test = report["metric"], report["test_metric"]
    chosen = report["chosen"]
    lines = [f"# Search: {report['family']}, chosen on dev {metric} ({report['direction']})",
             "",
             f"{len(report['settings'])} settings x {report['restarts']} restarts (seeds "
             f"{', '.join(map(str, report['seeds']))}), each trial `{report['command']}` "
             f"with the setting's flags; the setting with the best mean dev {metric} is "
             f"chosen" + (f"; its restarts alone are scored on the test set "
                          f"({report['test_file']['path']})" if report["test_file"]
                          else "; no test file was given") + ".",
             "", "## Settings", "",
             f"| setting | dev {metric} mean ± std | min | max | "
             + (f"{test} mean ± std | " if test else "") + "chosen |",
             "|---|---|---|---|" + ("---|" if test else "") + "---|"]
    for s in report["settings"]:
        mark = "**chosen**" if s["index"] == chosen["index"] else ""
        lines.append(f"| {setting_label(s['setting'])} | {_pm(s['dev'])} | "
                     f"{s['dev']['min']:.4f} | {s['dev']['max']:.4f} | "
                     + (f"{_pm(s['test'])} | " if test else "") + f"{mark} |")
    keys = sorted({k for row in report["trials"] for k in row["dev"]
                   if k != metric and not k.endswith("num_examples")})
    lines += ["", "## Trials", "",
              f"| trial | setting | restart | seed | dev {metric} | "
              + "".join(f"{k} | " for k in keys) + (f"{test} | " if test else "")
              + "seconds |",
              "|---" * (5 + len(keys) + (1 if test else 0) + 1) + "|"]
    for row in report["trials"]:
        lines.append(
            f"| {row['trial']} | {setting_label(row['setting'])} | {row['restart']} | "
            f"{row['seed']} | {row['dev'][metric]:.4f} | "
            + "".join(f"{row['dev'].get(k, float('nan')):.4f} | " for k in keys)
            + (f"{row['test'][test]:.4f} | " if test and row["test"] else
               "- | " if test else "")
            + f"{row['seconds'] if row['seconds'] is not None else '-'} |")
    lines += ["", "## Chosen", "",
              f"{setting_label(chosen['setting'])}: dev {metric} {_pm(chosen['dev'])} over "
              f"{len(chosen['trials'])} restarts"
              + (f", {test} {_pm(chosen['test'])}" if test and chosen["test"] else "")
              + f". Best restart on dev: trial {chosen['best_trial']} ({chosen['run_dir']}),"
              f" ready to export:", "",
              f"    python -m export.saved_model --task {report['family']} "
              f"--checkpoint_dir {chosen['run_dir']} --output_dir models/NAME", ""]
    if report["export"]:
        lines += [f"Exported to {report['export']['path']}.", ""]
    return "\n".join(lines)


def plot(path, report):
    """dev_scores.png: per setting, each restart's dev score (a dot) and their mean ±
    standard deviation (a bar); the chosen setting marked."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    settings, metric = report["settings"], report["metric"]
    figure = Figure(figsize=(max(4.0, 1.3 * len(settings) + 1.5), 4.0), dpi=100)
    axes = figure.add_subplot()
    scores = {row["trial"]: row["dev"][metric] for row in report["trials"]}
    restarts = report["restarts"]
    for x, s in enumerate(settings):
        chosen = s["index"] == report["chosen"]["index"]
        offsets = [(r - (restarts - 1) / 2) * 0.25 / max(1, restarts - 1)
                   for r in range(len(s["trials"]))]
        axes.scatter([x + o for o in offsets], [scores[t] for t in s["trials"]],
                     color="tab:red" if chosen else "tab:blue", zorder=3, s=18,
                     label="restart (chosen setting)" if chosen else None)
        axes.errorbar([x + 0.3], [s["dev"]["mean"]], yerr=[s["dev"]["std"]], fmt="_",
                      color="black", capsize=4, markersize=12,
                      label="mean ± std" if x == 0 else None)
    axes.set_xticks(range(len(settings)))
    axes.set_xticklabels([setting_label(s["setting"]).replace(", ", "\n")
                          for s in settings], fontsize=7)
    axes.set_ylabel(f"dev {metric}")
    axes.set_title(f"{report['family']}: dev {metric} of each restart, by setting",
                   fontsize=9)
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    figure.tight_layout()
    with atomic_write(path, "wb") as f:
        figure.savefig(f, format="png")


def hparams(path, report):
    """tensorboard/: TensorBoard's HParams dashboard over the trials (one run folder per
    trial: its setting, restart, dev scores and, where scored, test scores), written
    whole under a temporary name and swapped in."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    axes = {name: hp.HParam(name, hp.Discrete(list(values)))
            for name, values in report["grid"]}
    axes["restart"] = hp.HParam("restart", hp.Discrete(list(range(report["restarts"]))))
    names = sorted({k for row in report["trials"] for k in row["dev"]} |
                   {k for row in report["trials"] for k in (row["test"] or {})})
    with tf.summary.create_file_writer(tmp).as_default():
        hp.hparams_config(hparams=list(axes.values()),
                          metrics=[hp.Metric(name) for name in names])
    for row in report["trials"]:
        with tf.summary.create_file_writer(os.path.join(tmp, f"trial_{row['trial']}")) \
                .as_default():
            values = {axes[k]: v for k, v in row["setting"].items()}
            values[axes["restart"]] = row["restart"]
            hp.hparams(values, trial_id=row["trial"])
            for name, value in {**row["dev"], **(row["test"] or {})}.items():
                tf.summary.scalar(name, value, step=0)
    replace_path(tmp, path)


def write(output_dir, report, figures=True):
    """results.json and results.md; with `figures`, dev_scores.png and tensorboard/."""
    write_json(os.path.join(output_dir, "results.json"), report)
    with atomic_write(os.path.join(output_dir, "results.md")) as f:
        f.write(markdown(report))
    if figures:
        plot(os.path.join(output_dir, "dev_scores.png"), report)
        hparams(os.path.join(output_dir, "tensorboard"), report)


def read(output_dir):
    """results.json of output_dir, or None."""
    path = os.path.join(output_dir, "results.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
