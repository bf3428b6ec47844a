"""``x W + b`` on positions flattened to rows: the one matmul behind every projection of the model
(attention's W^Q, W^K, W^V, W^O of section 3.2.2 and the feed-forward W1, W2 of section 3.3)."""

from keras import ops


def project_rows(x, kernel, bias=None):
    """``x W + b`` with ``x`` flattened to ``[rows, fan_in]``; returns ``[rows, units]``.

    ``kernel`` is 2-D ``[fan_in, units]`` and ``bias`` 1-D or None; both are cast to ``x``'s dtype
    (the compute dtype under a mixed-precision policy). One 2-D matmul, and a bias added to 2-D rows
    whose gradient is cheaper than that of a bias added to ``[batch, length, units]`` (the fast
    path of the layers; the stock ``einsum`` / ``Dense`` form sits beside it; timings in
    ``results/benchmarks.md``).

    Example:

    >>> import numpy as np
    >>> x = np.ones((2, 3, 4), "float32")
    >>> tuple(project_rows(x, np.ones((4, 5), "float32"), np.zeros(5, "float32")).shape)
    (6, 5)
    """
    fan_in = kernel.shape[0] if kernel.shape[0] is not None else ops.shape(kernel)[0]
    rows = ops.matmul(ops.reshape(x, (-1, fan_in)), ops.cast(kernel, x.dtype))
    return rows if bias is None else rows + ops.cast(bias, x.dtype)
