"""The env: how it travels to the rollout process and is rebuilt there, its action spaces, the
state its wrappers hold, and the checks that the worker's copy gives the policy what the
trainer's env gives it. Recipes, state reading and checks run in the trainer; rebuilding and
applying the state in the rollout process. Nothing here imports TensorFlow or draws.
"""
