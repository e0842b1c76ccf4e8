"""What the render process draws with and writes (never imports TensorFlow): the MuJoCo scene
(``mujoco_scene``, ``camera``), the messages it reads (``stream``), state recordings
(``recording``), the names of videos and recordings (``videos``) and the files a writer holds
while it writes (``partial_files``). The sinks are ``async_plotter.sinks``."""
