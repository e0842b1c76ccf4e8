"""The plot worker: a rollout process (policy + physics, TensorFlow allowed) feeding a render
process (GL + frame sinks, never TensorFlow), both supervised from the trainer."""
