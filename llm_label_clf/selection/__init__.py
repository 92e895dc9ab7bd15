"""``LLMLabelClassifierCV``: the candidates it chooses among
(``candidates``), how each is scored from reads already made (``scores``),
and the search itself (``search``)."""
