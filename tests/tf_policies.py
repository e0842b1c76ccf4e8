"""TensorFlow policies of every supported kind, importable so worker processes can rebuild them."""
import numpy as np
import tensorflow as tf

from async_plotter import Serializable


class TF2Policy(Serializable):
    """An rllab-protocol policy on TF2 variables (eager), rebuilt from its constructor arguments."""

    def __init__(self, obs_dim, act_dim, hidden=16):
        Serializable.quick_init(self, locals())
        self.layer1 = tf.Variable(tf.random.normal((obs_dim, hidden), stddev=0.3))
        self.layer2 = tf.Variable(tf.random.normal((hidden, act_dim), stddev=0.3))

    @property
    def variables(self):
        return [self.layer1, self.layer2]

    def get_param_values(self):
        return np.concatenate([v.numpy().ravel() for v in self.variables])

    def set_param_values(self, flat):
        offset = 0
        for variable in self.variables:
            size = int(np.prod(variable.shape))
            variable.assign(np.reshape(flat[offset:offset + size], variable.shape))
            offset += size

    @tf.function
    def _mean(self, observations):
        return tf.tanh(tf.matmul(tf.tanh(tf.matmul(observations, self.layer1)), self.layer2))

    def get_action(self, observation):
        mean = self._mean(np.asarray(observation, np.float32)[None]).numpy()[0]
        return mean, {"mean": mean}


class LinearModule(tf.Module):
    """A tf.Module mapping a batch of observations to a batch of actions."""

    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.w = tf.Variable(tf.zeros((obs_dim, act_dim)))

    def __call__(self, observations):
        return tf.tanh(tf.matmul(observations, self.w))


class GraphModePolicy(Serializable):
    """A TF1-style policy: placeholders, variables in the default session's graph."""

    def __init__(self, obs_dim, act_dim):
        Serializable.quick_init(self, locals())
        v1 = tf.compat.v1
        self.observations = v1.placeholder(tf.float32, (None, obs_dim))
        self.w = v1.get_variable("w", (obs_dim, act_dim), initializer=v1.zeros_initializer())
        self.actions = tf.tanh(tf.matmul(self.observations, self.w))
        self.flat = v1.placeholder(tf.float32, (obs_dim * act_dim, ))
        self.assign = self.w.assign(tf.reshape(self.flat, (obs_dim, act_dim)))

    def get_param_values(self):
        return tf.compat.v1.get_default_session().run(self.w).ravel()

    def set_param_values(self, flat):
        tf.compat.v1.get_default_session().run(self.assign, {self.flat: flat})

    def get_action(self, observation):
        session = tf.compat.v1.get_default_session()
        action = session.run(self.actions, {self.observations: observation[None]})[0]
        return action, {"mean": action}
