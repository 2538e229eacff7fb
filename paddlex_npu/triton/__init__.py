"""The Triton wing: the model repository and the tritonserver command (``repo``), the Python-backend models that
run in it (``model``), and the watchdog that restarts a model whose instance lost its device (``watch``)."""
