"""``LLMLabelClassifierCV``: the candidates it chooses among
(``candidates``), how each is scored from reads already made (``scores``,
on the folds of ``folds``), the rule that chooses and what the choice scores
held out (``rules``), the temperature fitted to the choice
(``temperature``), and the search itself (``search``)."""
