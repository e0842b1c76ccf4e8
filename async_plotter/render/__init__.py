"""Drawing in the render process (never imports TensorFlow): MuJoCo scenes and frame sinks."""
