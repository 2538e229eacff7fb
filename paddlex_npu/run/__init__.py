"""The runtime, with no PaddleX: the session contract and its two runtimes (ais_bench, CPU reference), the OM
runner, the shape policy for gear/static OMs (:mod:`.gears`) and output buffer sizes (:mod:`.buffers`)."""
