"""`not_inlined(fn)`: fn as one call node of the graph being traced, not inlined into it.

TensorFlow's executor visits every node of a `tf.cond` branch that is not taken, and of a
`while_loop` body that runs zero times, passing "dead" tensors through them. Work that is
inlined there costs each request a walk over all of its nodes even when it does not run;
behind a call node that is not inlined it costs one node. Serving signatures use it for
what one short text does not need (bert_tf/text/batching.py: the sorted sub-batches and the
model in their loop; bert_tf/text/tokenization.py: the exact path): docs/serving.md, "Threads",
gives the timings.
"""

import tensorflow as tf


def not_inlined(fn):
    """In a graph (tf.function, tf.data), fn as a function called through one node that
    grappler does not inline (`_noinline`); eagerly, fn itself."""
    if not tf.inside_function():
        return fn
    return tf.function(fn, autograph=False, experimental_attributes={"_noinline": True})
