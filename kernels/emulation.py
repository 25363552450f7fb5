"""PyTorch emulation of the Gluon scan's algorithm (rescaled states), forward and hand-written backward.

This is the algorithm of ``kernels/gluon_scan.py`` written out in PyTorch, one token at a time and with the
kernels' storage schedule, so that it can be proven against the sequential reference (``naive.py``) on the CPU
before any GPU time is spent: in float64 the two agree to rounding, in float32 it shows the rounding the kernels
will have. It is a test oracle, not a backend (it is slow and ``palimpsa_scan`` never dispatches to it).

**Rescaled states** (gauge). Per head keep ``M' = e M`` and ``J' = e (I - I_prior)`` with a per-(token, head)
scale ``e_t = 1 / A_t``, ``A_t`` the decay accumulated since the last reference token. Then::

    M'_t = c_t M'_{t-1} + (e_t v_t) (x) k_t           c_t = e_t a_t / e_{t-1}
    J'_t = c_t J'_{t-1} + (e_t beta_t) (x) k_t^2
    D_t  = J'_t + e_t I_prior = e_t I_t,     M_t / I_t = M'_t / D_t     (exactly)

Between references ``c_t = 1`` (one FFMA per state and token instead of two). With ``S_t = log e_t``: a token is a
reference (``S_t = 0``, ``c_t = exp(log a_t - S_{t-1})``: a renormalising update) when ``S_{t-1} - log a_t``
would pass ``tau``, at the last token of every chunk of ``CT`` tokens and at the sequence's last token; otherwise
``S_t = S_{t-1} - log a_t`` and ``c_t = 1``. So the scale never exceeds ``e^tau`` (nothing overflows, nothing is
ever divided by a decay: ``c`` is a decay, ``e`` a product of inverse decays bounded by ``e^tau``), and the states
at chunk starts, at the end and in the checkpoints are the true ``(M, I)``. ``S`` accumulates in float64 (a scalar
per head and token), so that each ``e_t`` is rounded once instead of ``S`` drifting by ``tau * 2^-24`` per token.

**Pair-shared reciprocals.** On half of the state columns ``1 / D`` comes from one reciprocal per pair:
``1 / D1 = D2 / (D1 D2)``, ``1 / D2 = D1 / (D1 D2)`` (three multiplies instead of a second MUFU reciprocal; with
``D <= e^tau I`` the product cannot overflow). :func:`reciprocal_pairs` names the columns.

**Channel-shared reciprocals** (``pairs="channels"``, the forward only: ``kernels/cuda_walk.py``'s chunk walk). On the
first half of the states a lane's two channels share one reciprocal, the query folded into it:
``qr = q / (D0 D1)``, ``y0 += M'0 D1 qr``, ``y1 += M'1 D0 qr`` (:func:`channel_paired_readout`).

**Backward.** The adjoints live in the same gauge (``dM' = dM / e``, ``dJ' = dI / e``), so the reverse step is::

    w = q / D;  mu = M' / D;  dM'_t = c_{t+1} dM'_{t+1} + dy (x) w
    dJ'_t = c_{t+1} dJ'_{t+1} - (dy (x) w) mu - (e_t du) (x) (q / D)^2
    dv = e_t dM' k,  dbeta = e_t dJ' k^2,  dk = e_t (dM'^T v + 2 k (dJ'^T beta)),  dq = mu^T dy + 2 q e_t (du^T / D)

and the decay gradient needs only the state of the same token (the identities of kernel-design.md, in gauge form:
``a_t sum(dM_t M_{t-1}) = sum(dM'_t M'_t) - v . dv`` and ``a_t sum(dI_t (I_{t-1} - I_prior)) = sum(dJ'_t J'_t) -
beta . dbeta``), so the previous state need not stay live. States are recomputed, never rebuilt backwards:
checkpoints every ``CT`` tokens (written by the forward), a slab of every ``slab_every``-th state of a chunk
(global memory in the kernel), every ``shared_every``-th state of a slab block (shared memory), and inside such a
block of four tokens a two-slot schedule: walk to the middle and keep it, walk on to the last token, reverse it,
walk from the middle to the one before, reverse it and the middle, then walk from the block start to the first.

**The Gluon local pass's pass B** (:func:`local_pass_block`): one block of ``kernels/gluon_local.py``'s recompute,
its walk in ``(M, J)`` form rescaled from the block start (``WALK_RESCALE``) or plainly, and its reverse steps on
the kept states with their scales, as the kernel computes them.

**Chunks in parallel** (:func:`chunk_parallel_forward`, :func:`chunk_parallel_backward`: the next kernel step,
proven here first): the states and the adjoints are linear with a per-head scalar carry, so the chunks' walks need
not wait for one another; only a small scan over chunks connects them.
"""

from __future__ import annotations

import math

import torch

TAU = 16.0  # renormalise before the scale e = 1 / A passes e^TAU (kernel-design.md: 16-20)
CHUNK_SIZE = 256  # CT: tokens per checkpoint
SLAB_EVERY = 16  # backward: every 16th state of a chunk kept in the global slab
SHARED_EVERY = 4  # backward: every 4th state of a slab block kept in shared memory


def rescale_factors(log_decay: torch.Tensor, tau: float = TAU, chunk_size: int = CHUNK_SIZE):
    """Carries ``c_t`` and scales ``e_t`` of one sequence, ``[T, H]`` each (float64), and the reference flags.

    The rule of the kernels: per head a scalar walk over the tokens (``S`` in float64), reset at a reference.
    """
    length = log_decay.shape[0]
    log_decay = log_decay.double()
    scale = torch.zeros(log_decay.shape[1], dtype=torch.float64)
    carries, scales, references = [], [], []
    for t in range(length):
        grown = scale - log_decay[t]
        forced = t % chunk_size == chunk_size - 1 or t == length - 1
        reference = (grown > tau) | forced
        carries.append(torch.where(reference, (-grown).exp(), torch.ones_like(grown)))
        scale = torch.where(reference, torch.zeros_like(grown), grown)
        scales.append(scale.exp())
        references.append(reference)
    return torch.stack(carries), torch.stack(scales), torch.stack(references)


def paired_columns(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The state columns that share a reciprocal, as two index tensors ``(lo, hi)`` of partners.

    The kernels' thread owns runs of ``w = max(1, N // 32)`` columns in four tiles; tile 0 pairs with tile 1, i.e.
    column ``n`` with ``(n // w) % 4 == 0`` pairs with ``n + w``; columns of tiles 2 and 3 take their own.
    """
    width = max(1, size // 32)
    lo = torch.tensor([n for n in range(size) if (n // width) % 4 == 0 and n + width < size], dtype=torch.long)
    return lo, lo + width


def reciprocal_pairs(d: torch.Tensor, pairs: bool = True) -> torch.Tensor:
    """``1 / d`` over the last dimension (``N`` states), one reciprocal per pair of :func:`paired_columns`."""
    if not pairs:
        return 1 / d
    lo, hi = paired_columns(d.shape[-1])
    r = 1 / d
    shared = 1 / (d[..., lo] * d[..., hi])
    r[..., lo] = d[..., hi] * shared
    r[..., hi] = d[..., lo] * shared
    return r


def channel_paired_readout(m: torch.Tensor, d: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``sum_N M' q / D`` over ``[..., P, N]`` states with channels ``2c`` and ``2c + 1`` sharing one reciprocal on
    the first half of the states, the query folded into it (``kernels/cuda_walk.py``: ``PAIR_GROUPS`` 2 of a
    lane's 4 groups of 4 states, states ``32 j + 4 i + u`` with ``j < 2``, are states below ``N / 2``)."""
    half = d.shape[-1] // 2
    lo, hi = slice(0, None, 2), slice(1, None, 2)
    qr = q[..., :half] / (d[..., lo, :half] * d[..., hi, :half])
    own = (m[..., half:] / d[..., half:] * q[..., half:]).sum(-1)
    y = own.clone()
    y[..., lo] += (m[..., lo, :half] * d[..., hi, :half] * qr).sum(-1)
    y[..., hi] += (m[..., hi, :half] * d[..., lo, :half] * qr).sum(-1)
    return y


class _Sequence:
    """One sequence's inputs as ``[T, H, ...]`` views in the state dtype, ``k`` / ``q`` expanded to the heads."""

    def __init__(self, v, k, q, log_decay, beta, importance_prior, dtype, tau, chunk_size, pairs):
        heads = v.shape[1]
        per_group = heads // k.shape[1]
        self.v, self.log_decay = v.to(dtype), log_decay
        self.beta = None if beta is None else beta.to(dtype)
        self.k = k.to(dtype).repeat_interleave(per_group, dim=1)
        self.q = q.to(dtype).repeat_interleave(per_group, dim=1)
        self.prior, self.pairs, self.dtype = importance_prior, pairs, dtype
        carries, scales, self.references = rescale_factors(log_decay, tau, chunk_size)
        self.c, self.e = carries.to(dtype), scales.to(dtype)
        self.updates = 0  # state updates run (the forward's and every recompute's), for the schedule's cost

    def update(self, m, j, t):
        """``(M'_t, J'_t)`` from ``(M'_{t-1}, J'_{t-1})``: one FFMA per state when ``c_t = 1``."""
        self.updates += 1
        c, e = self.c[t][:, None, None], self.e[t][:, None, None]
        if not bool(self.references[t].any()):
            c = None  # no head renormalises at t: the kernels' fast branch, no multiply by c
        k = self.k[t][:, None, :]
        write = (e * self.v[t][..., None]) * k
        m = write + (m if c is None else c * m)
        if self.beta is not None:
            gain = (e * self.beta[t][..., None]) * (k * k)
            j = gain + (j if c is None else c * j)
        elif c is not None:
            j = c * j
        return m, j

    def denominator(self, j, t):
        return j + self.prior * self.e[t][:, None, None]

    def walk(self, m, j, start, end):
        """The state at token ``end - 1`` from the state at ``start - 1`` (``end == start``: unchanged)."""
        for t in range(start, end):
            m, j = self.update(m, j, t)
        return m, j


def _forward_one(seq: _Sequence, m, j, chunk_size):
    """One sequence's forward from its true initial state: ``y``, ``u``, the final true state, checkpoints."""
    ys, us, checkpoints = [], [], []
    for t in range(seq.v.shape[0]):
        if t % chunk_size == 0:  # a chunk start follows a reference token (or is the start): a true state
            checkpoints.append((m.clone(), j.clone()))
        m, j = seq.update(m, j, t)
        query, d = seq.q[t][:, None, :], seq.denominator(j, t)
        if seq.pairs == "channels":
            r = 1 / d
            ys.append(channel_paired_readout(m, d, query))
        else:
            r = reciprocal_pairs(d, seq.pairs)
            ys.append((m * r * query).sum(-1))
        us.append(seq.e[t][:, None] * (r * query * query).sum(-1))
    return torch.stack(ys), torch.stack(us), (m, j), checkpoints


def _bounds(batch, length, cu_seqlens):
    if cu_seqlens is None:
        return [(b, 0, length) for b in range(batch)]
    edges = cu_seqlens.tolist()
    return [(0, s, e) for s, e in zip(edges, edges[1:])]


def emulated_forward(v, k, q, log_decay, beta, importance_prior, initial_state, cu_seqlens=None, *, tau=TAU,
                     chunk_size=CHUNK_SIZE, pairs=True, dtype=torch.float64):
    """The forward, with ``palimpsa_scan``'s shapes (``cu_seqlens``: packed, ``B = 1``); ``pairs``: True shares
    reciprocals between state columns (the Gluon kernels'), ``"channels"`` between channel pairs with the query folded
    in (the CUDA chunk walk's), False shares none.

    Returns ``y``, ``(M_T, I_T)``, ``u`` (all in ``dtype``), the checkpoints (a list per sequence of true
    ``(M, J)`` at every chunk start) and the number of state updates.
    """
    batch, length, heads, head_dim = v.shape
    state_size = k.shape[-1]
    y = torch.zeros(batch, length, heads, head_dim, dtype=dtype)
    u = torch.zeros_like(y)
    finals_m, finals_i, checkpoints, updates = [], [], [], 0
    for index, (b, start, end) in enumerate(_bounds(batch, length, cu_seqlens)):
        seq = _Sequence(v[b, start:end], k[b, start:end], q[b, start:end], log_decay[b, start:end],
                        None if beta is None else beta[b, start:end], importance_prior, dtype, tau, chunk_size,
                        pairs)
        m, j = _initial(initial_state, index, heads, head_dim, state_size, importance_prior, dtype)
        y_s, u_s, (m, j), ck = _forward_one(seq, m, j, chunk_size)
        y[b, start:end], u[b, start:end] = y_s, u_s
        finals_m.append(m)
        finals_i.append(j + importance_prior)
        checkpoints.append(ck)
        updates += seq.updates
    return y, (torch.stack(finals_m), torch.stack(finals_i)), u, checkpoints, updates


def _initial(initial_state, index, heads, head_dim, state_size, importance_prior, dtype):
    """The true ``(M_0, J_0 = I_0 - I_prior)`` of sequence ``index``."""
    if initial_state is None:
        m = torch.zeros(heads, head_dim, state_size, dtype=dtype)
        return m, torch.zeros_like(m)
    m = initial_state[0][index].to(dtype)
    j = torch.zeros_like(m) if initial_state[1] is None else initial_state[1][index].to(dtype) - importance_prior
    return m, j


class _Adjoint:
    """The reverse walk's carried adjoints ``c_{t+1} dM'_{t+1}``, ``c_{t+1} dJ'_{t+1}`` and its outputs."""

    def __init__(self, seq: _Sequence, dm, dj, dy, du):
        self.seq, self.dm, self.dj, self.dy, self.du = seq, dm, dj, dy, du
        length, heads, head_dim = seq.v.shape
        zeros = torch.zeros
        self.dv = zeros(length, heads, head_dim, dtype=seq.dtype)
        self.dbeta = torch.zeros_like(self.dv)
        self.dk = zeros(length, heads, seq.k.shape[-1], dtype=seq.dtype)
        self.dq = torch.zeros_like(self.dk)
        self.dlog_decay = zeros(length, heads, dtype=seq.dtype)
        self.next = length  # the token the reverse step expects next: each is reversed once, in order

    def reverse(self, m, j, t):
        """The reverse step of token ``t`` from its own state ``(M'_t, J'_t)`` only."""
        assert t == self.next - 1, f"token {t} reversed out of order (expected {self.next - 1})"
        self.next = t
        seq = self.seq
        e = seq.e[t]
        r = reciprocal_pairs(seq.denominator(j, t), seq.pairs)
        query, key = seq.q[t][:, None, :], seq.k[t][:, None, :]
        w = query * r
        mu = m * r
        gw = self.dy[t][..., None] * w
        dm = self.dm + gw
        dj = self.dj - gw * mu
        self.dq[t] = (mu * self.dy[t][..., None]).sum(1)
        if self.du is not None:  # u = e sum_N q^2 / D: its adjoint reaches J' through D
            edu = (e[:, None] * self.du[t])[..., None]
            dj = dj - edu * w * w
            self.dq[t] += 2 * seq.q[t] * (edu * r).sum(1)
        ev = e[:, None]
        self.dv[t] = ev * (dm * key).sum(-1)
        dk = (dm * seq.v[t][..., None]).sum(1)
        decay = (dm * m).sum((1, 2)) - (seq.v[t] * self.dv[t]).sum(-1)
        if seq.beta is not None:
            self.dbeta[t] = ev * (dj * key * key).sum(-1)
            dk = dk + 2 * seq.k[t] * (dj * seq.beta[t][..., None]).sum(1)
            decay = decay - (seq.beta[t] * self.dbeta[t]).sum(-1)
        self.dk[t] = e[:, None] * dk
        self.dlog_decay[t] = decay + (dj * j).sum((1, 2))
        carry = seq.c[t][:, None, None]
        self.dm, self.dj = carry * dm, carry * dj


def _reverse_block(seq: _Sequence, adjoint: _Adjoint, m, j, start, end, shared_every):
    """Reverse tokens ``start .. end - 1`` from the state before ``start``.

    A full block of four: two states live (the kernels' register budget). Walk to the middle and keep it, walk on
    to the last token and reverse it, walk from the middle to the third and reverse it, reverse the middle, walk
    from the block start to the first token and reverse it: 6 updates. A shorter block (a sequence's tail) walks
    from the block start to each of its tokens in turn.
    """
    if end - start == shared_every == 4:
        mm, jm = seq.walk(m, j, start, start + 2)
        adjoint.reverse(*seq.walk(mm, jm, start + 2, start + 4), start + 3)
        adjoint.reverse(*seq.walk(mm, jm, start + 2, start + 3), start + 2)
        adjoint.reverse(mm, jm, start + 1)
        adjoint.reverse(*seq.walk(m, j, start, start + 1), start)
        return
    for last in range(end - 1, start - 1, -1):
        adjoint.reverse(*seq.walk(m, j, start, last + 1), last)


def _keep_every(seq: _Sequence, m, j, start, end, every):
    """Walk tokens ``start .. end - 1`` keeping the state before every ``every``-th one (the last kept state is
    not walked on: nothing needs the state after ``end - 1``)."""
    kept = []
    for tb in range(start, end, every):
        kept.append((m, j))
        if tb + every < end:
            m, j = seq.walk(m, j, tb, tb + every)
    return kept


def _backward_one(seq: _Sequence, checkpoints, adjoint: _Adjoint, chunk_size, slab_every, shared_every):
    """Reverse one sequence chunk by chunk: checkpoint -> slab -> shared -> two register slots."""
    length = seq.v.shape[0]
    for i_c in range(len(checkpoints) - 1, -1, -1):
        t0, t1 = i_c * chunk_size, min(i_c * chunk_size + chunk_size, length)
        slab = _keep_every(seq, *checkpoints[i_c], t0, t1, slab_every)  # pass A: global memory in the kernels
        for i_b in range(len(slab) - 1, -1, -1):
            tb = t0 + i_b * slab_every
            te = min(tb + slab_every, t1)
            shared = _keep_every(seq, *slab[i_b], tb, te, shared_every)  # pass B
            for i_s in range(len(shared) - 1, -1, -1):
                ts = tb + i_s * shared_every
                _reverse_block(seq, adjoint, *shared[i_s], ts, min(ts + shared_every, te), shared_every)


def emulated_backward(v, k, q, log_decay, beta, importance_prior, initial_state, checkpoints, dy, dm_t, di_t, du,
                      cu_seqlens=None, *, tau=TAU, chunk_size=CHUNK_SIZE, slab_every=SLAB_EVERY,
                      shared_every=SHARED_EVERY, pairs=True, dtype=torch.float64):
    """Gradients of ``v, k, q, log_decay, beta, M0, I0`` (None for absent inputs) from the forward's checkpoints
    and the gradients of ``y``, ``M_T``, ``I_T``, ``u`` (each may be None), and the number of state updates the
    recompute ran."""
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    grads = {name: torch.zeros(t.shape, dtype=dtype) for name, t in (("v", v), ("k", k), ("q", q),
                                                                     ("log_decay", log_decay))}
    grads["beta"] = None if beta is None else torch.zeros(beta.shape, dtype=dtype)
    bounds = _bounds(batch, length, cu_seqlens)
    n_states = len(bounds)
    dm0 = torch.zeros(n_states, heads, head_dim, state_size, dtype=dtype)
    di0 = torch.zeros_like(dm0)
    updates = 0
    for index, (b, start, end) in enumerate(bounds):
        seq = _Sequence(v[b, start:end], k[b, start:end], q[b, start:end], log_decay[b, start:end],
                        None if beta is None else beta[b, start:end], importance_prior, dtype, tau, chunk_size,
                        pairs)
        part = slice(start, end)
        zeros = torch.zeros(heads, head_dim, state_size, dtype=dtype)
        dm = zeros if dm_t is None else dm_t[index].to(dtype)  # the last token is a reference: e = 1
        dj = zeros if di_t is None else di_t[index].to(dtype)
        adjoint = _Adjoint(seq, dm, dj, torch.zeros(end - start, heads, head_dim, dtype=dtype) if dy is None
                           else dy[b, part].to(dtype), None if du is None else du[b, part].to(dtype))
        _backward_one(seq, checkpoints[index], adjoint, chunk_size, slab_every, shared_every)
        assert adjoint.next == 0, "not every token was reversed"
        updates += seq.updates
        per_group = heads // groups
        grads["v"][b, part] = adjoint.dv
        grads["k"][b, part] = adjoint.dk.view(end - start, groups, per_group, state_size).sum(2)
        grads["q"][b, part] = adjoint.dq.view(end - start, groups, per_group, state_size).sum(2)
        grads["log_decay"][b, part] = adjoint.dlog_decay
        if beta is not None:
            grads["beta"][b, part] = adjoint.dbeta
        dm0[index], di0[index] = adjoint.dm, adjoint.dj  # c_0 dM'_0: the initial state is a true state
    has_m0 = initial_state is not None
    has_i0 = has_m0 and initial_state[1] is not None
    return ((grads["v"], grads["k"], grads["q"], grads["log_decay"], grads["beta"], dm0 if has_m0 else None,
             di0 if has_i0 else None), updates)



def chunk_parallel_backward(v, k, q, log_decay, beta, importance_prior, initial_state, dy, dm_t, di_t, du, *,
                            chunk_size=CHUNK_SIZE, dtype=torch.float64):
    """The backward with its chunks independent of one another (issue 14's next step; not yet a kernel): gradients
    of ``v, k, q, log_decay, beta, M0, I0`` as :func:`emulated_backward` returns them, for a batch of equal-length
    sequences (no ``cu_seqlens``), in the true gauge.

    The adjoint recursions are linear with a scalar carry per head and token: ``dM_{t-1} = a_t dM_t + s_t`` and
    ``dI_{t-1} = a_t dI_t + r_t``, whose sources depend on the forward states, ``dy`` and ``du`` only. So:

    1. every chunk runs its reverse steps alone, from a zero adjoint at its end (all chunks at once in a kernel:
       at B = 1 and L = 8192, 32 times the programs of a sequential backward), giving each token's local
       gradients and the chunk's local adjoint at its start, ``(L_M, L_I)``;
    2. a scan over chunks gives the adjoint entering each chunk at its end: ``dM_in(c - 1) = L_M(c) + A_c
       dM_in(c)`` with ``A_c`` the chunk's product of decays, ``dM_in`` of the last chunk ``dM_T`` (``[P, N]``
       per chunk and head: small); what leaves the first chunk is ``dM0``;
    3. every output of a chunk is affine in its entering adjoint, and its correction is a few products per chunk:
       with ``A_t`` the decays after token ``t`` up to the chunk's end, ``dv += A_t (dM_in k_t)``, ``dbeta += A_t
       (dI_in k_t^2)``, ``dk += A_t (dM_in^T v_t + 2 k_t (dI_in^T beta_t))`` (``[CT, N] x [N, P]`` matrix
       products), and the decay gradient ``+= a_t A_t (<dM_in, M_{t-1}> + <dI_in, I_{t-1} - I_prior>)``, whose
       inner products follow from the chunk's first state and a prefix sum of ``A_r (v_r . dM_in k_r + beta_r .
       dI_in k_r^2)`` (no per-token state needed; :func:`corrections_chunk`). ``dq`` has no correction: it does not
       depend on the adjoints.
    """
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    per_group = heads // groups
    ip = importance_prior
    kh = k.to(dtype).repeat_interleave(per_group, dim=2)  # [B, T, H, N]
    qh = q.to(dtype).repeat_interleave(per_group, dim=2)
    vv, a = v.to(dtype), log_decay.to(dtype).exp()  # a: [B, T, H]
    bb = torch.zeros_like(vv) if beta is None else beta.to(dtype)
    gy = torch.zeros_like(vv) if dy is None else dy.to(dtype)
    gu = torch.zeros_like(vv) if du is None else du.to(dtype)
    shape = (batch, heads, head_dim, state_size)
    # the forward's states before each token (a kernel recomputes them from its checkpoints, chunk by chunk)
    m = torch.zeros(shape, dtype=dtype) if initial_state is None else initial_state[0].to(dtype)
    i = (torch.full(shape, ip, dtype=dtype) if initial_state is None or initial_state[1] is None
         else initial_state[1].to(dtype))
    before_m, before_i = [], []
    for t in range(length):
        before_m.append(m)
        before_i.append(i)
        at = a[:, t, :, None, None]
        m = at * m + vv[:, t, ..., None] * kh[:, t, :, None, :]
        i = at * i + (1 - at) * ip + bb[:, t, ..., None] * kh[:, t, :, None, :] ** 2
    before_m.append(m)
    before_i.append(i)
    dv, dbeta = torch.zeros_like(vv), torch.zeros_like(vv)
    dk, dq, dg = torch.zeros_like(kh), torch.zeros_like(qh), torch.zeros_like(a)
    starts = list(range(0, length, chunk_size))
    local, carry = [], []
    for s in starts:  # 1: each chunk alone, from a zero adjoint at its end
        dm, di = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
        for t in reversed(range(s, min(s + chunk_size, length))):
            mt, it = before_m[t + 1], before_i[t + 1]
            w = qh[:, t, :, None, :] / it  # q / I
            gyt, gut = gy[:, t, ..., None], gu[:, t, ..., None]
            dm = dm + gyt * w
            di = di - gyt * w * mt / it - gut * w * w
            dq[:, t] = (mt / it * gyt).sum(2) + 2 * qh[:, t] * (gut / it).sum(2)
            dv[:, t] = (dm * kh[:, t, :, None, :]).sum(-1)
            dbeta[:, t] = (di * kh[:, t, :, None, :] ** 2).sum(-1)
            dk[:, t] = (dm * vv[:, t, ..., None]).sum(2) + 2 * kh[:, t] * (di * bb[:, t, ..., None]).sum(2)
            at = a[:, t, :, None, None]
            dg[:, t] = at[..., 0, 0] * ((dm * before_m[t]).sum((-1, -2)) + (di * (before_i[t] - ip)).sum((-1, -2)))
            dm, di = at * dm, at * di
        local.append((dm, di))
        carry.append(a[:, s:s + chunk_size].prod(1)[..., None, None])  # [B, H, 1, 1]
    # 2: the entering adjoints, a scan over chunks from the end
    dm_in = torch.zeros(shape, dtype=dtype) if dm_t is None else dm_t.to(dtype)
    di_in = torch.zeros(shape, dtype=dtype) if di_t is None else di_t.to(dtype)
    entering = [None] * len(starts)
    for c in reversed(range(len(starts))):
        entering[c] = (dm_in, di_in)
        dm_in, di_in = local[c][0] + carry[c] * dm_in, local[c][1] + carry[c] * di_in
    dm0, di0 = dm_in, di_in
    lg = log_decay.to(dtype)
    for c, s in enumerate(starts):  # 3: the corrections, affine in the entering adjoint
        e = min(s + chunk_size, length)
        dm_e, di_e = entering[c]
        heads_first = [t[:, s:e].transpose(1, 2) for t in (vv, kh, lg, bb)]  # [B, H, n, ...]
        cdv, cdbeta, cdk, cdg = corrections_chunk(*heads_first, before_m[s], before_i[s], dm_e, di_e, ip)
        dv[:, s:e] += cdv.transpose(1, 2)
        dbeta[:, s:e] += cdbeta.transpose(1, 2)
        dk[:, s:e] += cdk.transpose(1, 2)
        dg[:, s:e] += cdg.transpose(1, 2)
    has_m0 = initial_state is not None
    has_i0 = has_m0 and initial_state[1] is not None
    return (dv, dk.view(batch, length, groups, per_group, state_size).sum(3),
            dq.view(batch, length, groups, per_group, state_size).sum(3), dg, None if beta is None else dbeta,
            dm0 if has_m0 else None, di0 if has_i0 else None)


def corrections_chunk(v, k, log_decay, beta, m_start, i_start, dm_e, di_e, importance_prior, *,
                      round_tf32=False):
    """The corrections of one chunk (any leading dims, e.g. ``[B, H]``) as the CUDA corrections compute them
    (``kernels/cuda_correct.py``): from ``[..., n, P]`` values and gains, ``[..., n, N]`` keys (each head's), ``[...,
    n]`` log decays, the chunk's first state ``(M, I)`` and the adjoint entering it at its end ``(dM_in, dI_in)``
    (``[..., P, N]`` each), what ``dv``, ``dbeta``, ``dk`` (the head's part) and ``dlog_decay`` gain.

    ``A_t`` (the decays after token ``t``) is the exponential of a suffix sum of log decays taken from the chunk's end
    (never a difference of running sums). The decay gradient's correction ``a_t A_t <dM_in, S_{t-1}>`` is
    ``<dM_in, decays(t..end) S_{t-1}>``, which grows by ``A_r (v_r . dM_in k_r + beta_r . dI_in k_r^2)`` past each token
    ``r`` from ``exp(sum of the chunk's log decays) <dM_in, S_start>`` (``dI_in`` likewise with ``I - I_prior``): an
    exclusive prefix sum. ``round_tf32``: the products' operands rounded to TF32 (keys, squared keys, values, gains
    and the adjoint), as the kernel's tensor cores read them."""
    r = tf32 if round_tf32 else (lambda x: x)
    beta = torch.zeros_like(v) if beta is None else beta
    suffix = log_decay.flip(-1).cumsum(-1).flip(-1)  # sums from each token to the end, running from the end
    after = torch.cat([suffix[..., 1:], torch.zeros_like(suffix[..., :1])], -1).exp()  # A_t
    m_k = r(k) @ r(dm_e).transpose(-1, -2)  # [..., n, P]: dM_in k_t
    i_k = r(r(k) * r(k)) @ r(di_e).transpose(-1, -2)  # dI_in k_t^2 (the kernel squares its TF32 keys)
    dk = after[..., None] * (r(v) @ r(dm_e) + 2 * k * (r(beta) @ r(di_e)))
    add = (v * m_k).sum(-1) + (beta * i_k).sum(-1)
    start = (dm_e * m_start).sum((-1, -2)) + (di_e * (i_start - importance_prior)).sum((-1, -2))
    terms = after * add
    before = torch.cat([torch.zeros_like(terms[..., :1]), terms[..., :-1].cumsum(-1)], -1)  # exclusive
    dg = log_decay.sum(-1, keepdim=True).exp() * start[..., None] + before
    return after[..., None] * m_k, after[..., None] * i_k, dk, dg


def chunk_parallel_forward(v, k, q, log_decay, beta, importance_prior, initial_state, *, chunk_size=CHUNK_SIZE,
                           dtype=torch.float64):
    """The forward with its chunks independent of one another (the counterpart of
    :func:`chunk_parallel_backward`): ``y``, the final ``(M, I)``, ``u`` and the chunk-start states (the
    checkpoints the backward reads), for a batch of equal-length sequences, in the true gauge.

    ``M`` and ``J = I - I_prior`` are linear with a per-head scalar carry (``J_t = a_t J_{t-1} + beta_t (x)
    k_t^2``), so: 1. every chunk sums its own tokens from a zero state (``M_loc``, ``J_loc``: SSD's chunk states,
    matrix products in a kernel); 2. a scan over chunks gives each chunk's first state, ``M_s(c + 1) = A_c M_s(c) +
    M_loc(c)``; 3. every chunk walks its tokens from that state for the readouts, which are not linear
    (``y = (M / I) q``), all chunks at once."""
    batch, length, heads, head_dim = v.shape
    per_group = heads // k.shape[2]
    ip = importance_prior
    kh = k.to(dtype).repeat_interleave(per_group, dim=2)
    qh = q.to(dtype).repeat_interleave(per_group, dim=2)
    vv, a = v.to(dtype), log_decay.to(dtype).exp()
    bb = torch.zeros_like(vv) if beta is None else beta.to(dtype)
    shape = (batch, heads, head_dim, k.shape[3])
    m = torch.zeros(shape, dtype=dtype) if initial_state is None else initial_state[0].to(dtype)
    j = (torch.zeros(shape, dtype=dtype) if initial_state is None or initial_state[1] is None
         else initial_state[1].to(dtype) - ip)
    starts = list(range(0, length, chunk_size))
    local = []
    for s in starts:  # 1: each chunk's own tokens, from zero
        e = min(s + chunk_size, length)
        ac = a[:, s:e]
        after = torch.cat([ac[:, 1:].flip(1).cumprod(1).flip(1), torch.ones_like(ac[:, :1])], 1)  # decays after t
        kc = kh[:, s:e]
        local.append((torch.einsum("bth,bthp,bthn->bhpn", after, vv[:, s:e], kc),
                      torch.einsum("bth,bthp,bthn->bhpn", after, bb[:, s:e], kc * kc), ac.prod(1)[..., None, None]))
    firsts = []
    for m_loc, j_loc, carry in local:  # 2: the chunks' first states, a scan over chunks
        firsts.append((m, j))
        m, j = carry * m + m_loc, carry * j + j_loc
    y, u = torch.zeros_like(vv), torch.zeros_like(vv)
    for (m, j), s in zip(firsts, starts, strict=True):  # 3: the readouts, every chunk from its first state
        for t in range(s, min(s + chunk_size, length)):
            at = a[:, t, :, None, None]
            m = at * m + vv[:, t, ..., None] * kh[:, t, :, None, :]
            j = at * j + bb[:, t, ..., None] * kh[:, t, :, None, :] ** 2
            w = qh[:, t, :, None, :] / (j + ip)
            y[:, t] = (m * w).sum(-1)
            u[:, t] = (qh[:, t, :, None, :] * w).sum(-1)
    checkpoints = [(fm, fj + ip) for fm, fj in firsts]
    return y, (m, j + ip), u, checkpoints


def local_pass_block(v, k, q, log_decay, beta, m0, i0, importance_prior, dy, dm_end, di_end, *, rescaled=True):
    """Pass B of the Gluon local pass (``kernels/gluon_local.py``) over one block of one head, as the kernel computes
    it: ``[T, P]`` values, gains and output gradients, ``[T, N]`` keys and queries, ``[T]`` log decays, the block's
    start state ``m0``, ``i0`` (``[P, N]``) and the adjoints of its end state. The walk keeps ``(M, J)``, ``J = I -
    I_prior``, rescaled by ``2^s`` (``s`` the log2 decays since the block start, negated: one multiply-add a state and
    token, ``WALK_RESCALE``) or plainly (``s = 0``), each state with its scale; the reverse steps read them as they
    are: ``r = 1 / (J' + 2^s I_prior)`` (``1 / I`` scaled), ``u = M' r`` (``M / I``), the output gradient scaled by
    ``2^s``, and the decay gradient's sum over the previous state scaled back by ``2^-s``. Returns the gradients of
    ``v``, ``k``, ``q``, ``log_decay``, ``beta`` and of the start state."""
    tokens = v.shape[0]
    log2_decay = log_decay / math.log(2.0)
    m, j, s = m0.clone(), i0 - importance_prior, torch.zeros((), dtype=v.dtype)
    kept = [(m, j, s)]  # kept[t + 1]: the state after token t, with its log2 scale
    for t in range(tokens):
        if rescaled:
            s = s - log2_decay[t]
            ke = k[t] * 2.0 ** s
            m = m + v[t][:, None] * ke[None, :]
            j = j + beta[t][:, None] * (k[t] * ke)[None, :]
        else:
            a = log_decay[t].exp()
            m = m * a + v[t][:, None] * k[t][None, :]
            j = j * a + beta[t][:, None] * (k[t] * k[t])[None, :]
        kept.append((m, j, s))
    dm, di, a_next = dm_end.clone(), di_end.clone(), torch.ones((), dtype=v.dtype)
    grads = {name: torch.zeros_like(x) for name, x in (("v", v), ("k", k), ("q", q), ("log_decay", log_decay),
                                                        ("beta", beta))}
    for t in range(tokens - 1, -1, -1):
        (m_t, j_t, s_t), (m_p, j_p, s_p) = kept[t + 1], kept[t]
        a = log_decay[t].exp()
        e = 2.0 ** s_t
        r = 1 / (j_t + importance_prior * e)
        u = m_t * r
        w = (dy[t] * e)[:, None] * q[t][None, :] * r
        dm = dm * a_next + w
        di = di * a_next - w * u
        grads["q"][t] = (u * dy[t][:, None]).sum(0)
        grads["k"][t] = (dm * v[t][:, None]).sum(0) + 2 * k[t] * (di * beta[t][:, None]).sum(0)
        grads["v"][t] = (dm * k[t][None, :]).sum(1)
        grads["beta"][t] = (di * (k[t] * k[t])[None, :]).sum(1)
        grads["log_decay"][t] = a * 2.0 ** (-s_p) * (dm * m_p + di * j_p).sum()
        a_next = a
    return grads, dm * a_next, di * a_next


def tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (float32) rounded to TF32, 10 bits of mantissa, ties away from zero (``cvt.rna.tf32.f32``): what a
    tensor-core product of the CUDA local pass reads of its operands."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).to(x.dtype)


def cuda_local_chunk(v, k, q, log_decay, beta, m0, i0, importance_prior, dy, *, tau=20.0, seg=16, sub=8,
                     round_tf32=False, decay_sum=False, subtract=None):
    """The CUDA local pass (``kernels/cuda_local.py``) over one chunk of one head, as the kernel computes it, from a
    zero adjoint at the chunk's end: ``[T, P]`` values, gains and output gradients, ``[T, N]`` keys and queries,
    ``[T]`` log decays, the chunk's checkpoint ``m0``, ``i0`` (``[P, N]``).

    Its state updates are matrix products over up to ``sub`` tokens at once (the kernel's tensor-core products:
    ``M += (w v)^T K``, ``J += (w beta)^T K^2`` for the tokens of one sub-block, the weights ``w`` zero past the token
    wanted). Pass A keeps every ``seg``-th state, each from the one before plainly (the start times the segment's decay,
    every token weighted by the decays after it). Pass B takes the segments from the last; in each, the state before
    every sub-block (its start, and the one a sub-block in, plainly); then every token's state from its sub-block's
    start: rescaled where the sub-block's log decay stays above ``-tau`` (``M' = S + sum_t (v_t / A_t) k_t``, ``A_t``
    the decay from the sub-block's start through token ``t``, so ``M' = M / A``), plainly elsewhere. The reverse step
    reads the rescaled states as they are and takes the decay gradient from the token's own state
    (``<dM, M_t> - v . dv + <dI, J_t> - beta . dbeta``). ``round_tf32``: the products' operands rounded to TF32 as
    the kernel's are (float32 inputs). ``decay_sum`` (a form the kernel does not run yet): the decay gradient as a sum
    from the chunk's end instead, ``dlog_decay_t = sum_{u >= t} (I_prior sum(tq_u mu_u) - v_u . dv_u - beta_u .
    dbeta_u)`` (``tq = dy q / I``, ``mu = M / I``: ``<dM_t, M_t> + <dI_t, J_t>`` is the next token's decay gradient
    plus ``<tq, M_t> - <tq mu, J_t> = I_prior sum(tq mu)``), which needs one product an element and token instead of
    the two of ``<dM, M> + <dI, J>``. ``subtract`` (a float, the kernel's ``TSUB``): in a rescaled sub-block, a token's
    state comes from the state after it less that token's term (``M' -= (v_u / A_u) k_u``, ``J' -= (beta_u / A_u)
    k_u^2``, the operands rounded as the product's, so that the term leaves as it came), which costs no product,
    wherever the log decay from the token to the last one whose state came from a product stays above ``-subtract``
    (the rounding errors of the state it is peeled from grow by that decay, up to ``e^subtract``); elsewhere from a
    product as above (``subtract`` 0, as the kernel's ``TSUB`` 0, peels none). Returns the gradients of ``v``, ``k``,
    ``q``, ``log_decay``, ``beta``, the local adjoints of the chunk's start state, and the products run (sub-blocks of
    tokens applied at once)."""
    tokens = v.shape[0]
    products = 0
    rnd = tf32 if round_tf32 else (lambda x: x)
    cum = torch.cumsum(log_decay, 0)  # the log decays summed from the chunk's start, through each token

    def g(t):  # the summed log decays through token t (t = -1: none)
        return cum[t] if t >= 0 else torch.zeros((), dtype=cum.dtype)

    def apply(m, j, first, last, weights):
        """``(m, j)`` plus tokens ``first .. last`` in one product, token t weighted by ``weights[t - first]``."""
        nonlocal products
        products += 1
        ts = torch.arange(first, last + 1)
        w = weights.to(v.dtype)
        kk = rnd(k[ts] * k[ts])
        m = m + (rnd(v[ts] * w[:, None])).T @ rnd(k[ts])
        j = j + (rnd(beta[ts] * w[:, None])).T @ kk
        return m, j

    def plain(m, j, first, last):  # the true state after token `last` from the true state before `first`
        keep = torch.exp(g(last) - g(first - 1))
        weights = torch.exp(g(last) - torch.stack([g(t) for t in range(first, last + 1)]))
        return apply(m * keep, j * keep, first, last, weights)

    grads = {name: torch.zeros_like(x) for name, x in (("v", v), ("k", k), ("q", q), ("log_decay", log_decay),
                                                        ("beta", beta))}
    n_seg = -(-tokens // seg)
    starts = [(m0.clone(), i0 - importance_prior)]  # pass A: the slab (the checkpoint first)
    for s in range(n_seg - 1):
        m, j = starts[-1]
        for b in range(seg // sub):
            m, j = plain(m, j, s * seg + b * sub, s * seg + b * sub + sub - 1)
        starts.append((m, j))
    dm = torch.zeros_like(m0)
    di = torch.zeros_like(m0)
    a_next = torch.zeros((), dtype=v.dtype)
    later = torch.zeros((), dtype=v.dtype)  # decay_sum: the decay gradient's terms summed from the chunk's end
    for s in range(n_seg - 1, -1, -1):
        t0, n_s = s * seg, min(seg, tokens - s * seg)
        n_sub = -(-n_s // sub)
        slots = [starts[s]]
        for b in range(1, n_sub):
            slots.append(plain(*slots[-1], t0 + (b - 1) * sub, t0 + b * sub - 1))
        for b in range(n_sub - 1, -1, -1):
            first = t0 + b * sub
            last = min(first + sub, t0 + n_s) - 1
            rescaled = bool(g(last) - g(first - 1) >= -tau)
            ref = None  # the last token whose state came from a product
            for t in range(last, first - 1, -1):
                if (subtract is not None and subtract > 0 and rescaled and ref is not None
                        and bool(g(ref) - g(t) >= -subtract)):  # the state after token t + 1 less that token's term
                    w = torch.exp(g(first - 1) - g(t + 1)).to(v.dtype)
                    ku = rnd(k[t + 1])
                    m = m - rnd(v[t + 1] * w)[:, None] * ku[None, :]
                    j = j - rnd(beta[t + 1] * w)[:, None] * rnd(k[t + 1] * k[t + 1])[None, :]
                    la = g(t) - g(first - 1)
                elif rescaled:
                    scales = torch.exp(g(first - 1) - torch.stack([g(u) for u in range(first, t + 1)]))
                    m, j = apply(*slots[b], first, t, scales)
                    la = g(t) - g(first - 1)
                    ref = t
                else:
                    m, j = plain(*slots[b], first, t)
                    la = torch.zeros((), dtype=v.dtype)
                inv, scale = torch.exp(-la), torch.exp(la)
                r = 1 / (j + importance_prior * inv)
                mu = m * r
                tq = (dy[t] * inv)[:, None] * q[t][None, :] * r
                dm = a_next * dm + tq
                di = a_next * di - tq * mu
                grads["q"][t] = (mu * dy[t][:, None]).sum(0)
                grads["v"][t] = (dm * k[t][None, :]).sum(1)
                grads["beta"][t] = (di * (k[t] * k[t])[None, :]).sum(1)
                grads["k"][t] = (dm * v[t][:, None]).sum(0) + 2 * k[t] * (di * beta[t][:, None]).sum(0)
                own = (v[t] * grads["v"][t]).sum() + (beta[t] * grads["beta"][t]).sum()
                if decay_sum:
                    later = later + importance_prior * (tq * mu).sum() - own
                    grads["log_decay"][t] = later
                else:
                    grads["log_decay"][t] = scale * ((dm * m).sum() + (di * j).sum()) - own
                a_next = torch.exp(log_decay[t])
    return grads, a_next * dm, a_next * di, products


