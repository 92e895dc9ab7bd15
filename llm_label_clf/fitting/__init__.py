"""``LLMLabelClassifier``'s fitting internals: the parameter table
(``params``), inputs and targets (``inputs``, ``targets``), each output's
classes and labels (``outputs``, ``label_words``), calibration
(``calibration``), and what ``fit`` decides (``fit``), returned as one
fitted object per output (``fitted``) that prediction calls."""
