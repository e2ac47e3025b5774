"""The floor of the house: what every other layer builds on.

``errors`` (``KilnError``), ``checks`` (argument checks and bounded message pieces),
``table`` (the closed code table, opaque layouts, and the one lazy ml_dtypes
accessor), ``payload`` (``PayloadInfo``, the one checked description of a payload),
``foreign`` (the registry of element types Kiln has no code for) and ``jsontext``
(the one strict JSON parser, with its depth and cost caps).  Nothing here
imports any other part of kiln_np.
"""
