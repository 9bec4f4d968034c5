"""Exporting a Keras model for training without Python (docs/training.md)."""

import tensorflow as tf

TRAIN_SIGNATURE = "train"


def export_for_training(model, path):
    """Writes `model` as a SavedModel that tf_ext's C++ trainer can train in training mode.

    Keras 3's `model.export(path)` keeps only the inference function (`serve`, and the
    `serving_default` signature), in which BatchNormalization uses its moving statistics and
    dropout does nothing. This writes the same `serve` endpoint and `serving_default` signature,
    plus a `train` endpoint and signature: the model called with `training=True`, in which
    BatchNormalization normalizes with the batch's statistics and updates its moving averages,
    and dropout draws fresh masks. Train it with `tf_ext_train --signature=train` (or
    `TrainerOptions::signature_key = "train"`); the trained export keeps both.

    Args:
      model: a built Keras 3 model (functional or sequential, with known inputs).
      path: the directory to write; as `model.export`, it must not hold a SavedModel already.
    """
    import keras  # pylint: disable=g-import-not-at-top

    def spec(t):
        return tf.TensorSpec(t.shape, t.dtype, name=getattr(t, "name", None))

    inputs = model.inputs
    signature = [tf.nest.map_structure(spec, inputs if len(inputs) > 1 else inputs[0])]
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", lambda x: model(x, training=False), input_signature=signature)
    archive.add_endpoint(TRAIN_SIGNATURE, lambda x: model(x, training=True),
                         input_signature=signature)
    archive.write_out(path, verbose=False)
