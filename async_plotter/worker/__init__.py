"""What the plot worker's two child processes run (the rollout process: policy, physics, its own
TensorFlow; the render process: GL and the sinks, never TensorFlow), and the data both ends of
their pipes share. Starting and watching them is ``async_plotter.supervision``'s.
"""
