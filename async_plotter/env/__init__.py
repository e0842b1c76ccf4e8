"""The env: how it travels to the worker and is rebuilt there (``recipe``), the old-gym adapter
(``gym_compat``), action spaces told apart by structure (``spaces``), the state its wrappers hold
and how it travels with every update (``state``), and the check that the worker's copy gives the
policy what the trainer's env gives it (``check``).

Recipes, state reading and the check run in the trainer; rebuilding and applying the state in
the rollout process. Nothing here imports TensorFlow or draws.
"""
