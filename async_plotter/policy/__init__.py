"""The policy: how each kind is read, called, shipped and rebuilt, and the one rule that the
worker's copy acts like the trainer's. The recipe and the check run in the trainer; the rebuilt
policy (``PolicyRuntime``) in the rollout process. TensorFlow is imported only for policies that
are TensorFlow's.
"""
