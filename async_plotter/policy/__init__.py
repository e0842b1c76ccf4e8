"""The policy: how each kind is read and called (``adapters``: rllab's protocol, Keras, a
``tf.Module``), how it travels and is rebuilt in the rollout process (``recipe``,
``serializable`` for rllab's ``Serializable``), the one rule that the worker's copy acts like
the trainer's (``check``), one traced TensorFlow function per step (``compiled_call``), Keras's
specifics (``keras_support``) and the random state kept around the checks (``random_state``).

The recipe and the check run in the trainer; the rebuilt policy (``PolicyRuntime``) in the
rollout process. TensorFlow is imported only for policies that are TensorFlow's.
"""
