"""A Keras model whose layers numpy computes acts in numpy in the worker: it computes what Keras
computes, for every nonlinearity, layer and graph it takes (skip connections, a layer called
twice), at any flat vector the trainer sends; a model numpy would compute differently travels as
its Keras config; and the worker then never loads TensorFlow."""
import numpy as np
import pytest

from async_plotter import Plotter, PolicyMismatchError
from async_plotter.policy.adapters import KerasAdapter
from async_plotter.policy.numpy_copy import keras_layer_graph
from async_plotter.policy.numpy_layers import ACTIVATIONS
from async_plotter.policy.recipe import describe_policy
from tests import policy_forms
from tests.conftest import loads_tensorflow, mapped_libraries, wait_for


def _copy(model):
    return keras_layer_graph(model, KerasAdapter().flat(model))


def _same_output(chain, model, adapter, flat, spread=1.5):
    """The chain given ``flat`` as the worker gets it, against the model given it as
    ``update_plot`` reads it, on observations ``spread`` units from zero or so."""
    observations = np.random.default_rng(1).normal(0.0, spread, (16, chain.inputs))
    observations = observations.astype(chain.dtype)
    adapter.set_flat(model, flat)
    chain.set_flat(flat)
    expected = np.asarray(model(observations, training=False))
    # An overflow would make the bound below infinite, and the comparison say nothing.
    assert np.isfinite(expected).all(), "the model overflows on these observations"
    # float32 rounding, which a LayerNormalization of a few values magnifies to ~1e-6 of the
    # output's scale; a wrong formula is off by far more
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(chain.forward(observations), expected, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(chain.act(observations[3]),
                               expected[3],
                               rtol=1e-4,
                               atol=1e-5 * scale)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_every_nonlinearity_it_takes_computes_what_keras_does(activation):
    import keras

    keras.utils.set_random_seed(0)  # the same weights each run
    model = keras.Sequential([
        keras.Input((5, )),
        keras.layers.Dense(7, activation=activation),
        keras.layers.Dropout(0.5),  # nothing at inference
        keras.layers.Dense(3),
        keras.layers.Activation(activation),
    ])
    chain = _copy(model)
    assert chain is not None
    adapter = KerasAdapter()
    flat = adapter.flat(model)
    spread = 0.3 if activation == "exponential" else 1.5  # exp twice overflows float32 soon
    _same_output(chain, model, adapter, flat, spread)
    _same_output(chain, model, adapter, (flat * 1.5 + 0.1).astype(flat.dtype), spread)  # an update


def _chain(*layers):
    """A model of ``layers`` (each ``(name, kwargs)`` of ``keras.layers``; ``"adapted"``: a
    Normalization adapted to data around 3) ending in a Dense layer of 3 outputs."""
    import keras

    built = []
    for name, kwargs in layers:
        if name == "adapted":
            layer = keras.layers.Normalization()
            layer.adapt(np.random.default_rng(0).normal(3.0, 2.0, (64, 5)).astype(np.float32))
        else:
            layer = getattr(keras.layers, name)(**kwargs)
        built.append(layer)
    return keras.Sequential([keras.Input((5, )), *built, keras.layers.Dense(3)])


HIDDEN = ("Dense", dict(units=8))
STATISTICS = dict(mean=[1, 2, 3, 4, 5.0], variance=[1, 4, 9, 0.5, 2.0])
#: every layer the copy takes besides Dense, Activation and Dropout, as ``_chain``'s arguments
LAYERS = {
    "Normalization, adapted": [("adapted", {})],
    "Normalization, given": [("Normalization", STATISTICS)],
    "Normalization, inverted": [("Normalization", dict(STATISTICS, invert=True))],
    "Normalization, one scalar": [("Normalization", dict(axis=None, mean=2.0, variance=3.0))],
    "LayerNormalization": [HIDDEN, ("LayerNormalization", {})],
    "LayerNormalization, plain": [HIDDEN, ("LayerNormalization", dict(center=False, scale=False))],
    "BatchNormalization": [HIDDEN, ("BatchNormalization", {})],
    "ReLU with its arguments":
    [HIDDEN, ("ReLU", dict(max_value=1.5, negative_slope=0.1, threshold=0.3))],
    "ReLU capped": [HIDDEN, ("ReLU", dict(max_value=6.0))],
    "LeakyReLU": [HIDDEN, ("LeakyReLU", {})],
    "PReLU": [HIDDEN, ("PReLU", {})],
    "ELU with its alpha": [HIDDEN, ("ELU", dict(alpha=0.5))],
    "Softmax": [HIDDEN, ("Softmax", {})],
    "UnitNormalization": [HIDDEN, ("UnitNormalization", {})],
    "Rescaling, noise and Flatten": [("Rescaling", dict(scale=0.5, offset=-1.0)), ("Flatten", {}),
                                     ("GaussianNoise", dict(stddev=0.3)),
                                     ("GaussianDropout", dict(rate=0.3)), ("Identity", {})],
}


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_every_layer_it_takes_computes_what_keras_does(case):
    model = _chain(*LAYERS[case])
    adapter = KerasAdapter()
    flat = adapter.flat(model)
    # Weights away from their initial values (ones, zeros): a variance of 1 and a mean of 0 hide
    # a step that leaves them out. Positive, as a variance is.
    moved = np.abs(flat * 1.5 + np.random.default_rng(2).normal(0.3, 0.2, flat.shape))
    adapter.set_flat(model, moved.astype(flat.dtype))
    chain = _copy(model)
    assert chain is not None, case
    _same_output(chain, model, adapter, adapter.flat(model))
    _same_output(chain, model, adapter, (moved * 0.5 + 0.2).astype(flat.dtype))  # an update


def test_functional_float64_and_bias_free_chains_are_taken():
    import keras

    inputs = keras.Input((4, ), dtype="float64")
    hidden = keras.layers.Dense(6, activation="relu", dtype="float64")(inputs)
    outputs = keras.layers.Dense(2, use_bias=False, dtype="float64")(hidden)
    model = keras.Model(inputs, outputs)
    chain = _copy(model)
    assert chain is not None and chain.dtype == np.float64
    adapter = KerasAdapter()
    _same_output(chain, model, adapter, adapter.flat(model) * 0.5)
    with pytest.raises(ValueError, match="has 42 parameters, got a vector of 41"):
        chain.set_flat(np.zeros(41))


def _inputs(size=5):
    import keras

    return keras.Input((size, ))


def _residual_blocks():
    """Blocks as residual RL networks write them (SimBa): x + Dense(relu(Dense(LayerNorm(x))))."""
    import keras

    inputs = _inputs()
    x = keras.layers.Dense(8)(inputs)
    for _ in range(2):
        y = keras.layers.LayerNormalization()(x)
        y = keras.layers.Dense(16, activation="relu")(y)
        x = keras.layers.Add()([x, keras.layers.Dense(8)(y)])
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(inputs, keras.layers.Dense(3, activation="tanh")(x))


def _input_joined_to_every_layer():
    """D2RL: the observation concatenated to each hidden layer's input."""
    import keras

    inputs = _inputs()
    x = keras.layers.Dense(8, activation="relu")(inputs)
    for _ in range(2):
        x = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([x, inputs]))
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def _operators():
    """``+``, ``-``, ``*`` and ``/`` of Keras tensors, a number among them."""
    import keras

    inputs = _inputs()
    hidden = keras.layers.Dense(5, activation="tanh")(inputs)
    mixed = (inputs + hidden) * 0.5 - keras.layers.Dropout(0.5)(hidden) / 3.0
    mixed = 1.0 - mixed / (2.0 + hidden * hidden)
    return keras.Model(inputs, keras.layers.Dense(3)(mixed))


def _elementwise_ops():
    """``keras.ops`` applied to tensors in a functional model, each as Keras computes it."""
    import keras

    inputs = _inputs()
    x = keras.layers.Dense(6)(inputs)
    ops = keras.ops
    parts = [
        ops.tanh(x),
        ops.relu(x),
        ops.sigmoid(x),
        ops.softplus(x),
        ops.softsign(x),
        ops.silu(x),
        ops.exp(-ops.square(x)),
        ops.sqrt(ops.abs(x)),
        ops.relu6(x * 4.0),
        ops.hard_sigmoid(x),
        ops.log_sigmoid(x),
        ops.hard_silu(x),
        ops.hard_tanh(x),
        ops.tanh_shrink(x),
        ops.sparse_plus(x),
        ops.sparse_sigmoid(x),
        ops.selu(x),
        ops.expm1(x),
        ops.log(ops.abs(x) + 1.0),
        ops.log1p(ops.abs(x)),
        ops.sign(x),
        ops.rsqrt(ops.square(x) + 1.0),
        ops.reciprocal(ops.abs(x) + 1.0),
        ops.sin(x),
        ops.cos(x),
        ops.erf(x),
    ]
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Concatenate()(parts)))


def _ops_with_arguments():
    """``keras.ops`` called with arguments of their own, or of two values, a number among them."""
    import keras

    inputs = _inputs()
    x = keras.layers.Dense(6)(inputs)
    ops = keras.ops
    parts = [
        ops.leaky_relu(x, 0.3),
        ops.gelu(x),  # the tanh approximation: keras.ops.gelu's default
        ops.gelu(x, approximate=False),
        ops.elu(x, alpha=0.5),
        ops.celu(x, alpha=0.7),
        ops.squareplus(x, b=2),
        ops.soft_shrink(x, threshold=0.3),
        ops.hard_shrink(x, threshold=0.3),
        ops.threshold(x, 0.1, -1.0),
        ops.clip(x, -0.5, 0.5),
        ops.softmax(x, axis=-1),
        ops.log_softmax(x),
        ops.glu(x),  # half as many values
        ops.maximum(x, 0.1),
        ops.minimum(0.2, x),
        ops.power(x, 2),
    ]
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Concatenate()(parts)))


def _constant_arrays():
    """Actions scaled to the env's range by arrays of one value per unit (and numpy scalars)."""
    import keras

    inputs = _inputs()
    squashed = keras.ops.tanh(keras.layers.Dense(3)(inputs - np.float32(0.5)))
    low, high = np.array([-2.0, -1.0, 0.0]), np.array([[2.0, 1.0, 3.0]], np.float32)
    return keras.Model(inputs, (squashed + 1) * ((high - low) / 2) + low)


def _backend_constants():
    """Operands made by the backend: ``keras.ops.convert_to_tensor`` and ``tf.constant``."""
    import keras
    import tensorflow as tf

    inputs = _inputs(4)
    scale = keras.ops.convert_to_tensor(np.array([2.0, 0.5, 1.0, -1.0], np.float32))
    actions = keras.ops.tanh(keras.layers.Dense(3)(inputs * scale))
    return keras.Model(inputs, actions * tf.constant([[1.0, 0.5, 2.0]]) + tf.constant(0.25))


def _every_merge():
    import keras

    inputs = _inputs()
    a, b = keras.layers.Dense(6)(inputs), keras.layers.Dense(6)(inputs)
    merged = [
        getattr(keras.layers, name)()([a, b])
        for name in ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum")
    ]
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Concatenate()(merged)))


def _shared_layer():
    import keras

    inputs = _inputs(4)
    square = keras.layers.Dense(4, activation="tanh")
    return keras.Model(inputs, square(square(inputs)))


def _skip_connection():
    return policy_forms.functional_with_skip()[0]


def _models_as_layers():
    """A Sequential torso and a functional residual block (called twice) used as layers."""
    import keras

    torso = keras.Sequential([
        keras.Input((5, )),
        keras.layers.Dense(6, activation="tanh"),
        keras.layers.LayerNormalization()
    ])
    block_in = keras.Input((6, ))
    block = keras.Model(block_in, block_in + keras.layers.Dense(6, activation="relu")(block_in))
    inputs = _inputs()
    return keras.Model(inputs, keras.layers.Dense(3)(block(block(torso(inputs)))))


GRAPHS = {
    "skip connection (the input joined to the output layer's)": _skip_connection,
    "residual blocks": _residual_blocks,
    "the input joined to every layer": _input_joined_to_every_layer,
    "+, -, * and / of tensors": _operators,
    "every merge layer": _every_merge,
    "keras.ops on tensors": _elementwise_ops,
    "keras.ops with arguments": _ops_with_arguments,
    "constant arrays as operands": _constant_arrays,
    "backend constants as operands": _backend_constants,
    "a layer called twice": _shared_layer,
    "models used as layers": _models_as_layers,
}


@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_every_graph_it_takes_computes_what_keras_does(case):
    model = GRAPHS[case]()
    graph = _copy(model)
    assert graph is not None, case
    adapter = KerasAdapter()
    flat = adapter.flat(model)
    _same_output(graph, model, adapter, flat)
    moved = flat * 1.5 + np.random.default_rng(3).normal(0.1, 0.2, flat.shape)
    _same_output(graph, model, adapter, moved.astype(flat.dtype))  # an update


def _dense(**kwargs):
    import keras

    return keras.Sequential([keras.Input((4, )), keras.layers.Dense(2, **kwargs)])


def _lora():
    model = _dense()
    model.layers[-1].enable_lora(1)
    return model


def test_without_keras_s_graph_a_functional_chain_is_still_taken_and_a_skip_is_not(monkeypatch):
    # A Keras that keeps no _nodes_by_depth: the layers in order, as before graphs were taken.
    from async_plotter.policy import numpy_copy

    monkeypatch.setattr(numpy_copy, "_layer_calls_by_depth", lambda model: None)
    chain, skip = policy_forms.functional()[0], _skip_connection()
    graph = _copy(chain)
    assert graph is not None and len(graph.nodes) == 2
    adapter = KerasAdapter()
    _same_output(graph, chain, adapter, adapter.flat(chain) * 0.5)
    assert _copy(skip) is None


def _sequence_input():
    import keras

    return keras.Sequential([keras.Input((3, 4)), keras.layers.Dense(2)])


def _stale_normalization():
    # Keras computes with the statistics of its last finalize_state(), the copy with the weights
    # the trainer sends: the two differ, so the model travels as its config.
    model = _chain(("adapted", {}))
    layer = model.layers[0]
    layer.set_weights([w + 1.0 for w in layer.get_weights()])
    return model


def _einsum_output():
    import keras

    inputs = _inputs(4)
    return keras.Model(inputs, keras.layers.EinsumDense("ab,bc->ac", output_shape=2)(inputs))


def _concatenated_over_the_batch():
    import keras

    inputs = _inputs(4)
    joined = keras.layers.Concatenate(axis=0)([inputs, inputs])
    return keras.Model(inputs, keras.layers.Dense(2)(joined))


def _times_a_variable():
    import keras

    inputs = _inputs(4)
    scale = keras.Variable(np.full(4, 2.0, np.float32), trainable=False)
    return keras.Model(inputs, keras.layers.Dense(2)(inputs * scale))


def _times_a_tf_variable():
    import keras
    import tensorflow as tf

    inputs = _inputs(4)
    return keras.Model(inputs,
                       keras.layers.Dense(2)(inputs * tf.Variable(np.full(4, 2.0, np.float32))))


def _subclassed_model_as_layer():
    import keras

    inputs = _inputs(4)
    return keras.Model(inputs, keras.layers.Dense(2)(policy_forms.TwoLayer()(inputs)))


def _op_it_does_not_compute():
    import keras

    inputs = _inputs(4)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.ops.cumsum(inputs, axis=-1)))


def _sparsemax():
    import keras

    inputs = _inputs(4)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.ops.sparsemax(inputs)))


def _glu_over_the_batch():
    import keras

    inputs = _inputs(4)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.ops.glu(inputs, axis=0)))


def _op_softmax_over_the_batch():
    import keras

    inputs = _inputs(4)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.ops.softmax(inputs, axis=0)))


def _dropout_kept_on():
    import keras

    inputs = _inputs(4)
    dropped = keras.layers.Dropout(0.5)(inputs, training=True)
    return keras.Model(inputs, keras.layers.Dense(2)(dropped))


NOT_TAKEN = {
    "a nonlinearity of your own": lambda: _dense(activation=lambda x: 2 * x),
    "subclassed": lambda: policy_forms.subclassed()[0],
    "a subclassed model used as a layer": _subclassed_model_as_layer,
    "Normalization whose weights were set without finalize_state()": _stale_normalization,
    "a layer it does not compute (EinsumDense)": _einsum_output,
    "a Softmax over the batch": lambda: _chain(("Softmax", dict(axis=0))),
    "a Concatenate over the batch": _concatenated_over_the_batch,
    "a Keras variable as operand": _times_a_variable,
    "a TensorFlow variable as operand": _times_a_tf_variable,
    "a keras.ops call it does not compute (cumsum)": _op_it_does_not_compute,
    "a keras.ops glu over the batch": _glu_over_the_batch,
    "a keras.ops sparsemax (Keras's is not the true one)": _sparsemax,
    "a keras.ops softmax over the batch": _op_softmax_over_the_batch,
    "a Dropout kept on at inference": _dropout_kept_on,
    "mixed precision": lambda: policy_forms.mixed_precision()[0],
    "LoRA": _lora,
    "input of rank 3": _sequence_input,
}


@pytest.mark.parametrize("case", sorted(NOT_TAKEN))
def test_a_model_numpy_would_compute_differently_travels_as_its_config(case):
    model = NOT_TAKEN[case]()
    assert _copy(model) is None
    recipe = describe_policy(model, KerasAdapter())
    assert recipe.kind == "keras"


def test_a_chain_travels_as_its_numpy_copy_without_keras_settings():
    model, _ = policy_forms.sequential()
    recipe = describe_policy(model, KerasAdapter())
    assert recipe.kind == "numpy" and recipe.keras_settings is None
    assert "numpy copy" in recipe.description


def test_the_trainer_side_check_still_catches_a_copy_that_acts_differently(tmp_path, monkeypatch):
    # Were the copy's own comparison with the model ever wrong, the check that compares every
    # worker copy with the trainer's policy stops it: here tanh is computed as the identity.
    from async_plotter.policy import numpy_copy

    monkeypatch.setattr(numpy_copy, "_differs", lambda chain, model, keras: None)
    monkeypatch.setitem(ACTIVATIONS, "tanh", lambda x: x)
    model, _ = policy_forms.sequential()
    # Whatever the first observation, every hidden unit gets 5: tanh gives 1, the identity 5.
    model.layers[0].set_weights([np.zeros((4, 8), np.float32), np.full(8, 5.0, np.float32)])
    model.layers[-1].set_weights([np.ones((8, 2), np.float32), np.zeros(2, np.float32)])
    with pytest.raises(PolicyMismatchError, match="would not act like the trainer's"):
        Plotter("CartPole-v1", model, video_dir=str(tmp_path))


def _keras_chain():
    import keras

    # A policy as people write them now: normalized input, layer-normalized hidden layer.
    return keras.Sequential([
        keras.Input((8, )),
        keras.layers.Normalization(mean=np.zeros(8), variance=np.full(8, 4.0)),
        keras.layers.Dense(16),
        keras.layers.LayerNormalization(),
        keras.layers.Activation("tanh"),
        keras.layers.Dense(2, activation="tanh"),
    ])


def _keras_graph_with_ops():
    import keras

    # A functional policy with keras.ops of its own: a leaky hidden layer, a residual connection,
    # the actions scaled by an array of one value per joint.
    inputs = keras.Input((8, ))
    hidden = keras.ops.leaky_relu(keras.layers.Dense(16)(inputs), 0.1)
    hidden = hidden + keras.ops.gelu(keras.layers.Dense(16)(hidden))
    actions = keras.ops.tanh(keras.layers.Dense(2)(hidden)) * np.array([1.0, 0.5], np.float32)
    return keras.Model(inputs, actions)


def _rl_mlp():
    from async_plotter.rl import GaussianMLPPolicy

    return GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(16, ), seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("make", [_keras_chain, _keras_graph_with_ops, _rl_mlp],
                         ids=["keras-chain", "keras-graph-with-ops", "rl-mlp"])
def test_a_numpy_copy_on_mujoco_is_shown_with_no_tensorflow_in_the_worker(
        make, tmp_path, no_leftovers):
    """A Keras chain of layers, a Keras graph with keras.ops and the RL host's MLP policies travel
    as their numpy copy: the rollout process never loads TensorFlow (its start-up and memory),
    and what it shows passed the trainer-side check."""
    policy = make()
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=50,
                 video_dir=str(tmp_path),
                 min_video_seconds=0,
                 deterministic=True) as plotter:
        plotter.update_plot(policy, iteration=0)
        wait_for(lambda: plotter.stats["video_log"], 120, message="the first video")
        libraries = mapped_libraries(plotter.stats["worker_pids"]["rollout"])
    stats = plotter.stats
    assert stats["policy_call"] == "numpy"
    assert stats["last_error"] is None and stats["restarts"] == 0
    assert not loads_tensorflow(libraries), "TensorFlow loaded"
    assert any("mujoco" in path for path in libraries)  # the maps were read: the env is there
    assert stats["final_video"] and stats["history"], "a video and a history recording"


@pytest.mark.parametrize("by_name", [True, False], ids=["dict", "list"])
def test_a_model_of_an_input_a_part_is_taken_and_fed_each_part(by_name):
    """A dict observation's parts by the inputs' names, a tuple's in order: before, a model of
    several inputs acted through TensorFlow in the worker."""
    import keras

    goal, state = keras.Input((3, ), name="goal"), keras.Input((5, ), name="state")
    hidden = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([state, goal]))
    action = keras.layers.Dense(2)(hidden) + keras.layers.Dense(2)(goal)  # a skip from one part
    model = keras.Model({"goal": goal, "state": state} if by_name else [goal, state], action)
    copy = _copy(model)
    assert copy is not None and copy.inputs == 8
    random = np.random.default_rng(3)
    parts = {"goal": random.normal(size=3), "state": random.normal(size=5)}
    observation = parts if by_name else (parts["goal"], parts["state"])
    batch = ({
        key: part[None]
        for key, part in parts.items()
    } if by_name else [parts["goal"][None], parts["state"][None]])
    np.testing.assert_allclose(copy.act(observation),
                               np.asarray(model(batch, training=False))[0],
                               rtol=1e-5,
                               atol=1e-6)
