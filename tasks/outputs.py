"""What the classification-style families share about a model's outputs: running a model
over an evaluation dataset padded to whole batches, and a numpy softmax of its logits
(tasks/families/classification/, tasks/families/swag/).
"""

import numpy as np


def predict_outputs(model, dataset, num_examples):
    """Runs the model over an evaluation dataset (padded to whole batches) -> numpy
    outputs of the first num_examples rows."""
    outputs = model.predict(dataset, verbose=0)
    return {k: np.asarray(v)[:num_examples] for k, v in outputs.items()}


def softmax(logits):
    """Row-wise softmax of float logits [N, K] (numpy, max-subtracted)."""
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)
