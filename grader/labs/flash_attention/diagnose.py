"""Lab 5 ``flash-attention``, grader side: the known mistakes a failed output is matched
against, each under the lab's own rule (its bound), named in plain words (:func:`diagnose`).

Each mistake is simulated in float64 from the case's inputs: scores scaled by 1/d; the output
never divided by the row sum; keys past N in a zero-filled tail tile counted with score 0; a
causal mask off by one either way, missing, or applied to a non-causal call; the running max
started at 0 instead of -inf (:func:`max_from_zero`); the running output not rescaled when the
row max grows (:func:`unrescaled`, FlashAttention's loop, Dao et al. 2022, Algorithm 1, for K/V
blocks of :data:`DIAGNOSIS_BLOCKS` rows); then NaN from a fully masked block, exp overflow, and
float16 accumulation. README.md says why each is looked for.
"""

from __future__ import annotations

import numpy as np

from reference_kernels.attention import attention_golden

#: the K/V block sizes the no-rescale diagnosis simulates
DIAGNOSIS_BLOCKS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256)
#: an alternative explanation matches when the output is within this many budgets of it
MATCH_BUDGETS = 4.0
#: the float16-accumulation hint is given for errors up to this many budgets (a float16 sum of
#: 257 terms uses about 2; an error of the outputs' own size, thousands)
FLOAT16_HINT_BUDGETS = 20.0


def max_from_zero(Q, K, V, causal: bool) -> np.ndarray:
    """What FlashAttention's loop computes when the running max m starts at 0 instead of
    -inf: m ends at max(0, row max), and each p = exp(s - m) is taken in float32, so on a row
    whose scores all lie far below zero every p underflows to 0, l = 0 and O = 0/0. A
    diagnosis of the grader's, (B, H, N, d) float64 (NaN on such rows)."""
    Q, K, V = (np.asarray(x, np.float64) for x in (Q, K, V))
    N, d = Q.shape[2], Q.shape[3]
    S = np.matmul(Q, np.swapaxes(K, -1, -2)) / np.sqrt(d)
    if causal:
        S = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, S)
    m = np.maximum(S.max(axis=-1, keepdims=True), 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        p = np.exp((S - m).astype(np.float32)).astype(np.float64)
        return np.matmul(p, V) / p.sum(axis=-1, keepdims=True)


def _matches_max_from_zero(out, alt, bound) -> bool:
    """True if ``alt`` (:func:`max_from_zero`) has rows with l = 0 (told apart from the
    reference, which has none) and ``out`` is non-finite on exactly those rows and within
    MATCH_BUDGETS x ``bound`` of ``alt`` elsewhere (a zero output names nothing)."""
    out = np.asarray(out, np.float64)
    dead = ~np.isfinite(alt).all(axis=-1)
    if not dead.any():
        return False
    bad = ~np.isfinite(out).all(axis=-1)
    if (bad != dead).any():
        return False
    live = ~dead
    bound = np.broadcast_to(np.asarray(bound, np.float64), out.shape)
    return bool((np.abs(out[live] - alt[live]) <= MATCH_BUDGETS * bound[live]).all())


def unrescaled(Q, K, V, causal: bool, Bc: int) -> np.ndarray:
    """What FlashAttention's loop computes (float64) when the running *output* is not rescaled
    by exp(m_old - m_new) as the running max grows (the running sum is): K/V blocks of ``Bc``
    rows in order, ``o += exp(S_blk - m_new) V_blk``, ``O = o / l``. A diagnosis of the
    grader's, (B, H, N, d)."""
    Q, K, V = (np.asarray(x, np.float64) for x in (Q, K, V))
    B, H, N, d = Q.shape
    S = np.matmul(Q, np.swapaxes(K, -1, -2)) / np.sqrt(d)
    if causal:
        S = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, S)
    m = np.full((B, H, N, 1), -np.inf)
    l = np.zeros((B, H, N, 1))
    o = np.zeros((B, H, N, d))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for k0 in range(0, N, Bc):
            s = S[..., k0:k0 + Bc]
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            live = np.isfinite(m_new)
            p = np.where(live, np.exp(s - np.where(live, m_new, 0.0)), 0.0)
            alpha = np.where(live, np.exp(m - np.where(live, m_new, 0.0)), 1.0)
            l = l * alpha + p.sum(axis=-1, keepdims=True)
            o = o + np.matmul(p, V[..., k0:k0 + Bc, :])
            m = np.where(live, m_new, m)
        return o / l


def _matches(out: np.ndarray, alt: np.ndarray, bound, ref, masked_rows=None) -> bool:
    """True if ``out`` is within MATCH_BUDGETS x ``bound`` of the alternative ``alt``, with
    non-finite values allowed only in ``masked_rows`` (bool (B, H, N): rows the alternative
    leaves without a key, whose 0/0 a kernel may write as NaN), and the alternative is told
    apart from the reference ``ref`` (off by more than 2 MATCH_BUDGETS budgets somewhere:
    an alternative that differs by less, say one extra key among 257, names nothing)."""
    bound_full = np.broadcast_to(np.asarray(bound, np.float64), np.shape(out))
    with np.errstate(invalid="ignore"):
        apart = np.abs(np.asarray(alt, np.float64) - ref) > 2 * MATCH_BUDGETS * bound_full
    if not np.any(apart | (np.isfinite(alt) != np.isfinite(ref))):
        return False
    out = np.asarray(out, np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        if masked_rows is None or (bad.any(axis=-1) & ~masked_rows).any():
            return False
    ok = np.isfinite(out)
    if not ok.any():
        return False
    bound = np.broadcast_to(np.asarray(bound, np.float64), out.shape)
    return bool((np.abs(out[ok] - alt[ok]) <= MATCH_BUDGETS * bound[ok]).all())


def diagnose(Q, K, V, causal: bool, out, bound, used: float = 0.0) -> str | None:
    """The known mistake ``out`` matches, in plain words, or None (module docstring).
    ``bound``: the rule's bound for this case (a float or an array of O's shape);
    ``used``: the share of it the output used (the float16 hint is for errors within
    :data:`FLOAT16_HINT_BUDGETS` budgets, not for gross ones)."""
    out = np.asarray(out, np.float64)
    d = Q.shape[-1]
    N = Q.shape[2]
    ref, lse = attention_golden(Q, K, V, causal)
    q, k = np.asarray(Q, np.float64), np.asarray(K, np.float64)
    S = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(d)
    if causal:
        S = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, S)
    m = S.max(axis=-1) if N else np.zeros(S.shape[:-1])
    with np.errstate(over="ignore", invalid="ignore"):
        alts = [(attention_golden(Q, K, V, causal, scale=1.0 / d), None,
                 f"the scores are scaled by 1/d; attention scales them by 1/sqrt(d) "
                 f"(1/sqrt({d}))"),
                ((ref * np.exp(lse - m)[..., None], lse), None,
                 "the output is never divided by the row sum l: O = o / l, once, after "
                 "the last K/V block")]
    if causal:
        for off, words in ((-1, "the diagonal is masked too (key j masked for j >= i): a "
                                "query attends to itself and every earlier key (mask "
                                "only j > i)"),
                           (1, "each query also sees the next key (j <= i + 1): the "
                               "causal mask is j > i, and nothing after the query")):
            alts.append((attention_golden(Q, K, V, True, causal_offset=off), off,
                         f"the causal mask is off by one: {words}"))
        alts.append((attention_golden(Q, K, V, False), None,
                     "the causal mask is not applied (causal=True: key j is masked for "
                     "query i whenever j > i)"))
    else:
        alts.append((attention_golden(Q, K, V, True), None,
                     "a causal mask was applied to a call with causal=False"))
        # keys past N in a zero-filled tail tile, not masked: each adds exp(0 - m) to l
        # and nothing to o; O = sum_j e^{s_j} v_j / (sum_j e^{s_j} + n_pad)
        for n_pad in sorted({(-N) % Bc for Bc in DIAGNOSIS_BLOCKS} - {0}):
            f = np.exp(lse - np.logaddexp(lse, np.log(n_pad)))
            alts.append(((ref * f[..., None], lse), None,
                         f"the {n_pad} key(s) past N in the last K/V tile count with score "
                         "0 (zero-filled, not masked): use only keys j < N"))
    if _matches_max_from_zero(out, max_from_zero(Q, K, V, causal), bound):
        return ("the output matches FlashAttention's loop with the running max started "
                "at 0 instead of -inf: on a row whose scores all lie far below zero every "
                "exp(s - 0) underflows to 0, so l = 0 and O = 0/0; start m at -inf (the "
                "first block's max then becomes m)")
    for (O_alt, lse_alt), _, words in alts:
        if _matches(out, O_alt, bound, ref, masked_rows=~np.isfinite(lse_alt)):
            return f"the output matches attention where {words}"
    for Bc in DIAGNOSIS_BLOCKS:
        if Bc >= N:
            break
        if _matches(out, unrescaled(Q, K, V, causal, Bc), bound, ref):
            return (f"the output matches FlashAttention's loop with K/V blocks of {Bc} "
                    "rows whose running output o is not rescaled when the row's running "
                    "max grows: multiply o (and l) by exp(m_old - m_new) before adding "
                    "the block's exp(s - m_new) V")
    if not np.isfinite(out).all():
        if np.nanmax(np.abs(np.where(np.isfinite(S), S, np.nan)), initial=0.0) > 88.0:
            return ("inf or NaN with scores of several hundred: exp overflows unless "
                    "each row's running max is subtracted first (exp(s - m))")
        return ("inf or NaN in O: a row whose every key in a K/V block is masked (keys "
                "past N in a padded tail block, or all after the query on the diagonal) "
                "has m = -inf there, and exp(-inf - (-inf)) = NaN: skip such a block or "
                "leave m, l and o untouched while the new max is -inf; and never write "
                "the padded rows past N")
    if np.dtype(Q.dtype) == np.float16 and used <= FLOAT16_HINT_BUDGETS:
        return ("errors of the size of float16 rounding: are the scores, the running "
                "sums or o accumulated in float16? Widen each element with float32(x) "
                "(on the simulator, as in numpy, 0.0 + a float16 value stays float16)")
    return None

