"""The kit every weight-file format builds on: mapped files, ``WeightTensor``,
``Weights``, tensor sources and the metadata encoding.  Nothing here names a format.
"""
