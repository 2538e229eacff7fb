"""Kernels: pure functions over bytes and arrays that the route's host steps and the servers share, with no PaddleX
and no other part of the package (the PNG read: :mod:`.png_read`; OCR boxes matched to table cells:
:mod:`.cell_match`). Tested in the unit layer (``tests/unit/kernels/``)."""
