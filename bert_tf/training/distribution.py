"""Choosing a tf.distribute strategy from the command line.

One training code path runs under all of them: one device (OneDeviceStrategy on a GPU, the
default strategy on the CPU), MirroredStrategy (GPUs, or logical CPU devices for testing),
MultiWorkerMirroredStrategy (cluster from TF_CONFIG) and TPUStrategy (`--tpu=NAME` through
TPUClusterResolver).
"""

import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def split_cpu(num_devices):
    """Splits the host CPU into `num_devices` logical devices (before TF initializes), so
    MirroredStrategy can be exercised on a machine without accelerators."""
    if num_devices and num_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)


def _tf_config_workers():
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG: not valid JSON ({e})") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def create_strategy(name="auto", tpu=None, tpu_zone=None, gcp_project=None, cpu_devices=0):
    """Returns the strategy named on the command line.

    auto: TPU when --tpu is given, multi_worker when TF_CONFIG names several workers,
    mirrored over all GPUs when there are several, otherwise one device.
    """
    strategy = _create_strategy(name, tpu, tpu_zone, gcp_project, cpu_devices)
    # The devices are set: the quiet start-up's one op may run now (bert_tf/base/tf_logs.py).
    from bert_tf.base.tf_logs import spend_int64_notice
    spend_int64_notice()
    return strategy


def _create_strategy(name, tpu, tpu_zone, gcp_project, cpu_devices):
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {STRATEGIES}, got {name!r}")
    if name == "auto":
        if tpu:
            name = "tpu"
        elif _tf_config_workers() > 1:
            name = "multi_worker"
        elif len(tf.config.list_physical_devices("GPU")) > 1 or cpu_devices > 1:
            name = "mirrored"
        else:
            name = "one_device"
    if name == "tpu":
        if not tpu:
            raise ValueError("--strategy=tpu needs --tpu=NAME (or 'local')")
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=tpu_zone, project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        split_cpu(cpu_devices)
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or \
            [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    # On the CPU: the default strategy, the same one device and the same numbers, bit for
    # bit. Keras' fit then reads each pass over a dataset with a plain iterator, where
    # OneDeviceStrategy's multi-device iterator instantiated a tokenizing pipeline again
    # for every pass (~0.5 s each; 13% of a small GLUE run's CPU time).
    return tf.distribute.get_strategy()


def worker_devices(strategy):
    """The devices of this worker's replicas (the default strategy's: its one device)."""
    try:
        return tuple(strategy.extended.worker_devices)
    except RuntimeError:    # the default strategy has no list
        return ("/cpu:0",)


def describe(strategy):
    """The strategy in words, for a run's first lines."""
    name = type(strategy).__name__
    if name.startswith("_Default"):
        name = "one device (the default strategy)"
    return f"{name} with {strategy.num_replicas_in_sync} replica(s)"
