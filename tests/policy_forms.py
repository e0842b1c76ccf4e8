"""CartPole policies in every form a TensorFlow user writes, each with a knob that makes it push
the cart left or right, so a test can tell from the video which policy the worker showed.

Importable by worker processes (registered classes and factories are found by reference)."""
import functools
import os

import numpy as np
import tensorflow as tf
import keras

from async_plotter import Serializable

OBS, ACTIONS = 4, 2
LEFT, RIGHT = -1.0, 1.0
#: the adapted Normalization layer sees cart positions around this; its copy without the
#: adapted mean sees positions around 0 and would act on the pole instead
_SHIFT = 10.0


def _logits_bias(direction):
    """Output bias that makes argmax pick action 0 (left) or 1 (right) whatever the input."""
    return np.array([-3.0 * direction, 3.0 * direction], np.float32)


def _push(model, direction):
    """Set the last Dense layer's bias so the model pushes ``direction``."""
    dense = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dense)]
    kernel, _ = dense[-1].get_weights()
    dense[-1].set_weights([np.zeros_like(kernel), _logits_bias(direction)])


def sequential():
    model = keras.Sequential([
        keras.Input((OBS, )),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(ACTIONS)
    ])
    return model, functools.partial(_push, model)


def functional():
    inputs = keras.Input((OBS, ))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(ACTIONS)(hidden))
    return model, functools.partial(_push, model)


def functional_with_skip():
    """The observation joins the hidden layer's output (a skip connection): the worker computes
    the graph in numpy."""
    inputs = keras.Input((OBS, ))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    joined = keras.layers.Concatenate()([inputs, hidden])
    model = keras.Model(inputs, keras.layers.Dense(ACTIONS)(joined))
    return model, functools.partial(_push, model)


@keras.saving.register_keras_serializable("async_plotter_tests")
class TwoLayer(keras.Model):
    """A subclassed, registered model."""

    def __init__(self, units=8, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="tanh")
        self.out = keras.layers.Dense(ACTIONS)

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def subclassed():
    model = TwoLayer()
    model(np.zeros((1, OBS), np.float32))
    return model, functools.partial(_push, model)


def _adapted_normalization():
    layer = keras.layers.Normalization()
    data = np.random.default_rng(0).normal(0.0, 1.0, (256, OBS)).astype(np.float32)
    data[:, 0] += _SHIFT
    layer.adapt(data)
    return layer


def _push_on_position(dense, inputs):
    """Make ``dense`` (the output layer, ``inputs`` wide) read only the normalized position: it is
    about -10, so the logits are about [-10, 10] * direction."""

    def push(direction):
        kernel = np.zeros((inputs, ACTIONS), np.float32)
        kernel[0] = [direction, -direction]
        dense.set_weights([kernel, np.zeros(ACTIONS, np.float32)])

    return push


def normalization():
    """Adapted on cart positions around +10; the output reads the normalized position only, so
    the trainer's copy (which subtracts 10) pushes one way and a copy without the adapted mean
    another. A chain the worker computes in numpy."""
    model = keras.Sequential(
        [keras.Input((OBS, )),
         _adapted_normalization(),
         keras.layers.Dense(ACTIONS)])
    return model, _push_on_position(model.layers[-1], OBS)


def normalization_through_tensorflow():
    """As ``normalization()``, the output computed by an ``EinsumDense`` layer, which the numpy
    copy does not compute: the worker rebuilds the model from its Keras config and acts through
    TensorFlow, where the layer's derived state must be remade after every update."""
    inputs = keras.Input((OBS, ))
    normalized = _adapted_normalization()(inputs)
    output = keras.layers.EinsumDense("ab,bc->ac", output_shape=ACTIONS, bias_axes="c")
    return keras.Model(inputs, output(normalized)), _push_on_position(output, OBS)


def mixed_precision():
    previous = keras.config.dtype_policy().name
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model, push = sequential()
    finally:
        keras.config.set_dtype_policy(previous)
    return model, push


def float64():
    model = keras.Sequential([
        keras.Input((OBS, ), dtype="float64"),
        keras.layers.Dense(8, activation="tanh", dtype="float64"),
        keras.layers.Dense(ACTIONS, dtype="float64")
    ])
    return model, functools.partial(_push, model)


def loaded_from_file(directory):
    model, _ = functional()
    path = os.path.join(directory, "policy.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    return loaded, functools.partial(_push, loaded)


class LinearPolicy(tf.Module):
    """The module saved as a SavedModel below: logits = obs @ w + b."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.zeros((OBS, ACTIONS)))
        self.b = tf.Variable(tf.zeros(ACTIONS))

    @tf.function(input_signature=[tf.TensorSpec((None, OBS), tf.float32)])
    def serve(self, observations):
        return tf.matmul(observations, self.w) + self.b


def save_linear_policy(directory):
    path = os.path.join(directory, "saved_policy")
    tf.saved_model.save(LinearPolicy(), path)
    return path


def tfsm_layer(directory):
    """A Keras model around a SavedModel (``TFSMLayer``); rebuilding it needs
    ``keras.config.enable_unsafe_deserialization()``, which the test sets in the trainer."""
    path = save_linear_policy(directory)
    model = keras.Sequential([keras.Input((OBS, )), keras.layers.TFSMLayer(path, "serve")])

    def push(direction):
        layer = model.layers[-1]
        for weight in layer.weights:
            if tuple(weight.shape) == (ACTIONS, ):
                weight.assign(_logits_bias(direction))

    return model, push


class SavedModelPolicy(tf.Module):
    """A module holding a ``tf.saved_model.load`` result, which ``tf.Module.variables`` does
    not look into."""

    def __init__(self, path):
        super().__init__()
        self.loaded = tf.saved_model.load(path)

    def __call__(self, observations):
        return self.loaded.serve(observations)


def saved_model_module(directory):
    path = save_linear_policy(directory)
    module = SavedModelPolicy(path)
    factory = functools.partial(SavedModelPolicy, path)
    return module, lambda direction: module.loaded.b.assign(_logits_bias(direction)), factory


class LazyLinear(tf.Module):
    """Creates its variables on its first call, as Sonnet-style modules do."""

    def __init__(self):
        super().__init__()
        self.w = None
        self.b = None

    def __call__(self, observations):
        if self.w is None:
            self.w = tf.Variable(tf.zeros((observations.shape[-1], ACTIONS)))
            self.b = tf.Variable(tf.zeros(ACTIONS))
        return tf.matmul(observations, self.w) + self.b


def lazy_module_built():
    module = LazyLinear()
    module(tf.zeros((1, OBS)))
    return module, lambda direction: module.b.assign(_logits_bias(direction))


class ProtocolPolicy(Serializable):
    """An rllab-protocol policy whose step is a ``tf.function`` method."""

    def __init__(self):
        Serializable.quick_init(self, locals())
        self.w = tf.Variable(tf.zeros((OBS, ACTIONS)))
        self.b = tf.Variable(tf.zeros(ACTIONS))

    def get_param_values(self):
        return np.concatenate([self.w.numpy().ravel(), self.b.numpy()])

    def set_param_values(self, flat):
        self.w.assign(np.reshape(flat[:OBS * ACTIONS], (OBS, ACTIONS)))
        self.b.assign(flat[OBS * ACTIONS:])

    @tf.function
    def _logits(self, observations):
        return tf.matmul(observations, self.w) + self.b

    def get_action(self, observation):
        logits = self._logits(np.asarray(observation, np.float32)[None]).numpy()[0]
        return int(np.argmax(logits)), {"mean": logits}


def protocol_tf_function():
    policy = ProtocolPolicy()
    return policy, lambda direction: policy.b.assign(_logits_bias(direction))


class NumpyInside(tf.Module):
    """Calls ``.numpy()`` in its step, which no traced function can: it runs eagerly."""

    def __init__(self):
        super().__init__()
        self.b = tf.Variable(tf.zeros(ACTIONS))

    def __call__(self, observations):
        values = tf.convert_to_tensor(observations).numpy()
        return tf.constant(values @ np.zeros((OBS, ACTIONS), np.float32)) + self.b


def untraceable_module():
    module = NumpyInside()
    return module, lambda direction: module.b.assign(_logits_bias(direction))
