# cython: freethreading_compatible = True
"""Buffers handed from the core to Arrow, and bit packing of validity/bool bytes.

The decoder keeps one byte per slot for validity and bools (a byte store on the hot path is
cheaper than a read-modify-write of a bit); packing them into Arrow bitmaps happens once per
batch here.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject

cdef extern from "Python.h":
    int Py_IsInitialized() nogil
    unsigned long PyThread_get_thread_ident() nogil
from cpython.pythread cimport (
    WAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

import numpy as np


cdef extern from *:
    void __builtin_prefetch(const void* addr) nogil

cdef enum:
    PREFETCH = 16


# ---- buffer pool ---------------------------------------------------------------------
#
# A batch's column buffers are large (tens of MB for 50k records) and short-lived: the user
# drops a batch once written, and the next one needs the same sizes again. Freed, malloc
# hands such blocks back to the kernel, and each page of the next batch's buffers then costs
# a page fault on its first write: a third of a 50k-record nested decode. So large blocks
# are kept here, up to a byte limit, and handed out again to the first request they fit.
#
# The limit is per thread that decodes (each has a pool of its own, below): two threads each
# transcoding a batch need two batches' blocks, and a pool holding one batch's worth handed
# every other block back to the kernel, to be faulted in again (measured: 65k-record whole
# messages, 2 threads, ~1,100 faults and 0.3 munmap a batch against 76 and 0 on one
# thread; benchmarks/README.md, "Threads").
#
# Which block a request gets decides what it costs: a pooled block is in memory only as far
# as it was ever written (malloc's fresh pages are mapped on first write), and a request
# handed a block written to N bytes faults in every page it writes past N. On one thread
# each request finds the block it had last batch; two threads' requests interleave, and the
# smallest block that fits was often another column's, written less far (measured: 65k-record
# whole messages, 2 threads, ~30 faults a batch against ~7 on one, in the written tails of
# such blocks). So the pool remembers how far each block was written (`pool_touched`, kept
# across its loans in `lent_*`) and hands out, of the blocks that fit, the one that leaves the
# fewest unwritten bytes to the request, then the smallest.
#
# Those rules still moved blocks from column to column: a request asks a little more than its
# column wrote last batch (the learned size plus headroom), so its own block, written to
# what the column wrote, lost to a block another column had written further, and that
# column then wrote past the block it got (measured: 16k-record whole messages, 2 threads,
# 17 faults a batch against 7.5 on one, all in the written tails of blocks that changed
# column, and fresh blocks for the requests left without one). So a request may name the
# buffer it is for (`key`: the decoder's column or group and which of its buffers), and a
# block goes back to the buffer it served last before thread or written extent count: it
# is written as far as that buffer ever wrote, on either thread.
#
# And each thread that decodes has a pool of its own: a block goes back to the pool of the
# thread that took it (whichever thread frees it), and a thread takes only its own blocks
# (then shared ones, below), never another live thread's. With one pool for all, how many
# blocks of a kind existed followed how the threads had interleaved so far: two threads
# that had never needed a block at the same moment shared one, and the first batch in which
# they did made a second and faulted its pages in, whenever that came (measured: flat-4
# 16k records, two threads, 0.1, 12.8 and 0.2 faults a batch in three runs; the gathered
# strings' block, made on the first overlap of the two threads' gathers). Per thread, each
# thread's blocks are what its own batches need, made in its first batch and reused after,
# as on one thread alone, however the threads run. Blocks of a thread that ended, and those
# given back by threads that never decoded, are shared: anyone may take them.

cdef enum:
    POOL_MIN = 64 * 1024    # smaller blocks: malloc reuses them from its own free lists
    POOL_SLOTS = 2048
    POOL_OWNERS = 64        # pools: 0 the shared one, then one per thread that decodes

cdef uint8_t* pool_data[POOL_SLOTS]
cdef int64_t pool_size[POOL_SLOTS]
cdef int64_t pool_touched[POOL_SLOTS]   # bytes from its start the block is known written to
cdef int pool_owner[POOL_SLOTS]         # the pool it belongs to (0: shared)
cdef uint64_t pool_key[POOL_SLOTS]      # the buffer it served last (pool_take's key; 0: none)
cdef int pool_count = 0
cdef int64_t pool_bytes = 0
cdef int64_t pool_limit = 256 << 20
cdef int64_t pool_hits = 0
cdef int64_t pool_misses = 0
cdef bint owner_live[POOL_OWNERS]       # a thread holds this pool (slot 0: never)
cdef int64_t owner_bytes[POOL_OWNERS]   # bytes held in each pool
cdef int pool_live = 0                  # threads with a pool of their own
cdef PyThread_type_lock pool_lock = PyThread_allocate_lock()
# Buffers from this size on are given back without the GIL (smaller: the hand-off of the
# GIL would cost more than the free).
cdef int64_t FREE_NOGIL = 256 * 1024

# The calling thread's pool: 0 until its first decode call, then its slot (-1: none free,
# it uses the shared pool). Thread-local in C: read on every large take and give, without
# the GIL.
cdef extern from *:
    """
    #if defined(_MSC_VER)
    static __declspec(thread) int wa_pool_slot = 0;
    #else
    static __thread int wa_pool_slot = 0;
    #endif
    static inline int wa_pool_slot_get(void) { return wa_pool_slot; }
    static inline void wa_pool_slot_set(int s) { wa_pool_slot = s; }
    """
    int wa_pool_slot_get() noexcept nogil
    void wa_pool_slot_set(int s) noexcept nogil

cdef extern from "Python.h":
    PyObject* PyThreadState_GetDict()
    int PyDict_SetItemString(PyObject* d, const char* key, object value) except -1


cdef inline int pool_me() noexcept nogil:
    cdef int s = wa_pool_slot_get()
    return s if s > 0 else 0


# Blocks out on loan from the pool: how far each was written when it left (its pages stay
# in memory with it), found again by address when it comes back. An open-addressing table;
# entries are hints only (a block grown by realloc elsewhere leaves a stale one, matched by
# size too, and the table is emptied when 3/4 full).
cdef enum:
    LENT_BITS = 12
    LENT_SLOTS = 1 << LENT_BITS

cdef uintptr_t lent_data[LENT_SLOTS]
cdef int64_t lent_size[LENT_SLOTS]
cdef int64_t lent_touched[LENT_SLOTS]
cdef int lent_owner[LENT_SLOTS]
cdef uint64_t lent_key[LENT_SLOTS]
cdef int lent_count = 0


cdef inline int lent_home(uintptr_t p) noexcept nogil:
    return <int>(((p >> 4) * <uint64_t>0x9E3779B97F4A7C15) >> (64 - LENT_BITS))


cdef void lent_put(uint8_t* data, int64_t size, int64_t touched, int owner,
                   uint64_t key) noexcept nogil:
    global lent_count
    cdef int i
    if lent_count >= LENT_SLOTS * 3 // 4:
        memset(lent_data, 0, sizeof(lent_data))
        lent_count = 0
    i = lent_home(<uintptr_t>data)
    while lent_data[i] != 0 and lent_data[i] != <uintptr_t>data:
        i = (i + 1) & (LENT_SLOTS - 1)
    if lent_data[i] == 0:
        lent_count += 1
    lent_data[i] = <uintptr_t>data
    lent_size[i] = size
    lent_touched[i] = touched
    lent_owner[i] = owner
    lent_key[i] = key


cdef int64_t lent_take(uint8_t* data, int64_t size, int* owner, uint64_t* key) noexcept nogil:
    """How far the block at data (of size bytes) was written when lent, or -1 when not
    known, and (in *owner, *key) the pool and buffer it was lent to; its entry leaves the
    table (backward-shift deletion keeps the probes whole)."""
    global lent_count
    cdef int i = lent_home(<uintptr_t>data), j, k
    cdef int64_t touched
    while lent_data[i] != <uintptr_t>data:
        if lent_data[i] == 0:
            return -1
        i = (i + 1) & (LENT_SLOTS - 1)
    touched = lent_touched[i] if lent_size[i] == size else -1
    if touched >= 0:
        owner[0] = lent_owner[i]
        key[0] = lent_key[i]
    lent_count -= 1
    j = i
    while True:
        j = (j + 1) & (LENT_SLOTS - 1)
        if lent_data[j] == 0:
            break
        k = lent_home(lent_data[j])
        # Entry j stays when its home lies cyclically in (i, j]; else it fills the hole.
        if (i < k <= j) if i <= j else (i < k or k <= j):
            continue
        lent_data[i] = lent_data[j]
        lent_size[i] = lent_size[j]
        lent_touched[i] = lent_touched[j]
        lent_owner[i] = lent_owner[j]
        lent_key[i] = lent_key[j]
        i = j
    lent_data[i] = 0
    return touched


cdef inline void pool_remove(int i) noexcept nogil:
    # Slot i leaves the pool (its block is the caller's now); the last slot takes its place.
    global pool_count, pool_bytes
    pool_bytes -= pool_size[i]
    owner_bytes[pool_owner[i]] -= pool_size[i]
    pool_count -= 1
    pool_data[i] = pool_data[pool_count]
    pool_size[i] = pool_size[pool_count]
    pool_touched[i] = pool_touched[pool_count]
    pool_owner[i] = pool_owner[pool_count]
    pool_key[i] = pool_key[pool_count]


cdef inline int64_t pool_cap() noexcept nogil:
    # All pools together: the limit once per thread with a pool of its own (at least once).
    return pool_limit * (pool_live if pool_live > 1 else 1)


cdef void pool_trim() noexcept nogil:
    """Free blocks (lock held) until every pool holds at most the limit and all of them
    together at most pool_cap(): shared blocks first, then the largest."""
    cdef int i, best
    cdef bint over_all
    while pool_count > 0:
        over_all = pool_bytes > pool_cap()
        best = -1
        for i in range(pool_count):
            if not (over_all or owner_bytes[pool_owner[i]] > pool_limit):
                continue
            if best < 0 or (pool_owner[i] == 0) > (pool_owner[best] == 0) or (
                    (pool_owner[i] == 0) == (pool_owner[best] == 0)
                    and pool_size[i] > pool_size[best]):
                best = i
        if best < 0:
            return
        PyMem_RawFree(pool_data[best])
        pool_remove(best)


cdef uint8_t* pool_alloc(int64_t size, bint zero, int64_t* allocated) noexcept nogil:
    """At least `size` bytes (zeroed if asked; NULL when out of memory); *allocated is set to
    the block's real size, which is what pool_free must be given back."""
    return pool_take(size, zero, allocated, 0)


cdef uint8_t* pool_take(int64_t size, bint zero, int64_t* allocated, uint64_t key) noexcept nogil:
    """pool_alloc for the buffer named `key` (0: none): a pooled block that served the same
    buffer last comes first."""
    cdef int i, best = -1, me
    cdef int64_t unwritten, best_unwritten = 0, touched
    cdef bint other, best_other = True, stranger, best_stranger = True
    cdef uint8_t* p = NULL
    global pool_hits, pool_misses
    if size < 1:
        size = 1
    if size >= POOL_MIN:
        me = pool_me()
        PyThread_acquire_lock(pool_lock, WAIT_LOCK)
        # Of this thread's own blocks and the shared ones (never another live thread's:
        # above), never one more than twice the request (memory held for a column must stay
        # proportional to what it stores); of those, one that served the same buffer last
        # (written as far as that buffer writes; keyless requests prefer keyless blocks),
        # then its own over a shared one, then the one written furthest into the request's
        # size (its fresh pages fault), then the smallest.
        for i in range(pool_count):
            if size <= pool_size[i] <= 2 * size and (pool_owner[i] == me or pool_owner[i] == 0):
                stranger = pool_key[i] != key
                other = pool_owner[i] != me
                unwritten = size - pool_touched[i] if pool_touched[i] < size else 0
                if best < 0 or stranger < best_stranger or (stranger == best_stranger and (
                        other < best_other or (other == best_other and (
                            unwritten < best_unwritten or (unwritten == best_unwritten
                                                           and pool_size[i] < pool_size[best]))))):
                    best = i
                    best_unwritten = unwritten
                    best_other = other
                    best_stranger = stranger
        if best >= 0:
            p = pool_data[best]
            allocated[0] = pool_size[best]
            touched = pool_touched[best]
            if zero and touched < size:
                touched = size   # the memset below writes it
            lent_put(p, pool_size[best], touched, me, key)
            pool_remove(best)
            pool_hits += 1
        else:
            pool_misses += 1
        PyThread_release_lock(pool_lock)
        if p != NULL:
            if zero:
                memset(p, 0, <size_t>size)
            return p
        # A new block gets a size class more than it asks (1/16 to 1/8 over the request):
        # it serves the same buffer batch after batch, and a batch that needs a little more
        # than the last still fits it; a block that did not stole another buffer's, which
        # then went without (measured: a batch 1% larger than the last, two new blocks).
        # Unnamed requests too (Arrow trees' gathered columns): sized to the class alone,
        # a flat-4 16k batch's 127,012-127,372-byte offsets missed the 126,976-byte
        # blocks of earlier batches, batch after batch on two threads (a fresh block
        # each, its pages faulted in). The tail is address space: never written unless used.
        size = size_class(size + (size >> 4))
        p = <uint8_t*>(PyMem_RawCalloc(<size_t>size, 1) if zero else PyMem_RawMalloc(<size_t>size))
        allocated[0] = size if p != NULL else 0
        if p != NULL and (key != 0 or me != 0):
            # Lent like a pooled block, so that it comes back to its buffer and its thread's
            # pool (written: none known; calloc's fresh pages are not written).
            PyThread_acquire_lock(pool_lock, WAIT_LOCK)
            lent_put(p, size, 0, me, key)
            PyThread_release_lock(pool_lock)
        return p
    p = <uint8_t*>(PyMem_RawCalloc(<size_t>size, 1) if zero else PyMem_RawMalloc(<size_t>size))
    allocated[0] = size if p != NULL else 0
    return p


cdef inline int64_t size_class(int64_t size) noexcept nogil:
    """size rounded up to the next of 16 steps per power of two (at most 1/16 more; whole
    pages from 128 KiB on). A batch a little larger than the last then still fits the
    blocks the last one gave back: exact sizes missed the pool on every batch that grew by
    a few bytes (measured: 65k-record flat-4 batches, 0.8 misses a batch on one thread)."""
    cdef int64_t step = 1
    while step * 32 <= size:
        step *= 2
    return (size + step - 1) & ~(step - 1)


cdef void pool_free(uint8_t* data, int64_t allocated) noexcept nogil:
    pool_give(data, allocated, 0)


cdef void pool_give(uint8_t* data, int64_t allocated, int64_t written) noexcept nogil:
    if allocated >= POOL_MIN and data != NULL:
        pool_keep_large(data, allocated, written)
    else:
        PyMem_RawFree(data)


cdef void pool_keep(uint8_t* data, int64_t allocated, int64_t written) noexcept nogil:
    """Keep a large block in the pool it was lent from (or free it past the limit)."""
    global pool_count, pool_bytes
    cdef int64_t touched
    cdef int owner = pool_me()   # a block not lent by the pool: the freeing thread's
    cdef uint64_t key = 0
    PyThread_acquire_lock(pool_lock, WAIT_LOCK)
    touched = lent_take(data, allocated, &owner, &key)
    if touched < written:
        touched = written
    if (pool_count < POOL_SLOTS and owner_bytes[owner] + allocated <= pool_limit
            and pool_bytes + allocated <= pool_cap()):
        pool_data[pool_count] = data
        pool_size[pool_count] = allocated
        pool_touched[pool_count] = min(touched, allocated)
        pool_owner[pool_count] = owner
        pool_key[pool_count] = key
        pool_count += 1
        pool_bytes += allocated
        owner_bytes[owner] += allocated
        data = NULL
    PyThread_release_lock(pool_lock)
    PyMem_RawFree(data)


# Called through a pointer so that the compiler keeps it out of pool_give: inlined, its
# frame was set up for every small free too (callgrind, 1-record whole messages:
# ~4,500 instructions a call).
cdef void (*pool_keep_large)(uint8_t*, int64_t, int64_t) noexcept nogil
pool_keep_large = pool_keep


@cython.no_gc
cdef class PoolOwner:
    """A thread's hold on its pool, kept in the thread's state dict: Python clears that dict
    when the thread ends, and this gives the thread's blocks (pooled, or still out on loan)
    to the shared pool, where any thread may take them."""
    cdef int slot
    cdef unsigned long ident

    def __dealloc__(self):
        global pool_live
        cdef int i
        PyThread_acquire_lock(pool_lock, WAIT_LOCK)
        for i in range(pool_count):
            if pool_owner[i] == self.slot:
                pool_owner[i] = 0
        owner_bytes[0] += owner_bytes[self.slot]
        owner_bytes[self.slot] = 0
        for i in range(LENT_SLOTS):
            if lent_data[i] != 0 and lent_owner[i] == self.slot:
                lent_owner[i] = 0
        owner_live[self.slot] = False
        pool_live -= 1
        pool_trim()
        PyThread_release_lock(pool_lock)
        if PyThread_get_thread_ident() == self.ident:
            wa_pool_slot_set(0)   # (a thread state deleted while its thread goes on)


cdef void pool_register() except *:
    """The calling thread gets a pool of its own (the shared one when all slots are taken
    or it has no thread state dict)."""
    global pool_live
    cdef int s, found = -1
    cdef PoolOwner hold
    cdef PyObject* d = PyThreadState_GetDict()
    if d == NULL:
        wa_pool_slot_set(-1)
        return
    PyThread_acquire_lock(pool_lock, WAIT_LOCK)
    for s in range(1, POOL_OWNERS):
        if not owner_live[s]:
            found = s
            owner_live[s] = True
            pool_live += 1
            break
    PyThread_release_lock(pool_lock)
    if found < 0:
        wa_pool_slot_set(-1)
        return
    hold = PoolOwner.__new__(PoolOwner)
    hold.slot = found
    hold.ident = PyThread_get_thread_ident()
    wa_pool_slot_set(found)
    PyDict_SetItemString(d, "wirearrow.buffer_pool", hold)


cdef class PoolUser:
    """Made by each decode call: a thread's first one gives it a pool of its own."""

    def __cinit__(self):
        if wa_pool_slot_get() == 0:
            pool_register()


def buffer_pool(limit=None):
    """Statistics of the pool of large column buffers, after setting its byte limit if given.

    wirearrow keeps the large buffers of dropped batches (up to `limit` bytes for each
    thread that decodes, 256 MiB by default) for the next batch to reuse, instead of
    returning them to the system and paying a page fault per 4 KiB when writing fresh ones.
    Each thread that decodes reuses its own blocks; a thread's blocks are shared once it
    ends. limit=0 frees them all and disables it. Returns a dict: limit (per thread),
    threads (live threads with a pool of their own: the pools hold up to limit * threads
    together), bytes and blocks held, hits and misses of large requests so far.
    """
    global pool_limit
    if limit is not None:
        if limit < 0:
            raise ValueError("buffer_pool: limit must be >= 0")
        PyThread_acquire_lock(pool_lock, WAIT_LOCK)
        pool_limit = limit
        pool_trim()   # to the new limit, largest blocks first
        PyThread_release_lock(pool_lock)
    return {"limit": pool_limit, "threads": pool_live, "bytes": pool_bytes,
            "blocks": pool_count, "hits": pool_hits, "misses": pool_misses}


# Not tracked by the cyclic GC: its one object field (`base`) is another OwnedBuffer made
# before it, never itself or a container, so no cycle runs through it. A wide plan's
# decode hands out ~1,400 of them a call; tracked, each batch's pushed the collector over
# its threshold and every collection walked the Result's lists of ~16,000 columns.
@cython.no_gc
cdef class OwnedBuffer:
    def __cinit__(self):
        self.data = NULL
        self.size = 0
        self.allocated = 0
        self.exports = 0

    def __dealloc__(self):
        if self.data == NULL or self.base is not None:
            return
        if self.size >= FREE_NOGIL:
            # Freeing a large block gives its pages back to the kernel (munmap), in time
            # proportional to the pages touched: other threads run Python meanwhile.
            with nogil:
                pool_give(self.data, self.allocated, self.size)
        else:
            pool_give(self.data, self.allocated, self.size)
        self.data = NULL

    @staticmethod
    cdef OwnedBuffer adopt(uint8_t* data, int64_t size, int64_t allocated=0):
        cdef OwnedBuffer b = OwnedBuffer.__new__(OwnedBuffer)
        b.data = data
        b.size = size
        b.allocated = allocated
        return b

    @staticmethod
    cdef OwnedBuffer view(OwnedBuffer base, int64_t size):
        """The first `size` bytes of base (at most its size), sharing its memory."""
        cdef OwnedBuffer b = OwnedBuffer.__new__(OwnedBuffer)
        b.data = base.data
        b.size = min(size, base.size)
        b.base = base
        return b

    @property
    def unwritten(self):
        """True for a decoder column no record wrote to (a view of shared zeros)."""
        return self.base is not None

    def __len__(self):
        return self.size

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("wirearrow buffers are read-only once handed out")
        self.shape[0] = self.size
        self.strides[0] = 1
        view.buf = <void*>(self.data if self.data != NULL else <uint8_t*>"")
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = "B"
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1


def pack_bits(const uint8_t[::1] flags, int64_t n):
    """Pack n bytes (0 / non-zero) into an LSB-first Arrow bitmap.

    Returns (bitmap, zeros): zeros is the number of zero bytes, so a validity caller can
    drop the bitmap when it is 0.
    """
    if not 0 <= n <= flags.shape[0]:
        raise ValueError("pack_bits: n outside the input")
    cdef int64_t nbytes = (n + 7) // 8, allocated
    cdef uint8_t* out = pool_alloc(nbytes, False, &allocated)
    if out == NULL:
        raise MemoryError()
    cdef int64_t i, j, ones = 0
    cdef uint8_t byte
    cdef const uint8_t* src = &flags[0] if n > 0 else NULL
    with nogil:
        if nbytes > 0:
            memset(out, 0, <size_t>nbytes)
        for i in range(n // 8):
            byte = 0
            for j in range(8):
                byte |= (src[i * 8 + j] != 0) << j
            out[i] = byte
        i = n // 8
        if n % 8:
            byte = 0
            for j in range(n % 8):
                byte |= (src[i * 8 + j] != 0) << j
            out[i] = byte
        for i in range(nbytes):
            ones += popcount8(out[i])
    return OwnedBuffer.adopt(out, nbytes, allocated), n - ones


cdef inline int popcount8(uint8_t v) noexcept nogil:
    v = v - ((v >> 1) & 0x55)
    v = (v & 0x33) + ((v >> 2) & 0x33)
    return (v + (v >> 4)) & 0x0F


def gather_strings(const uint8_t[::1] arena, const uint8_t[::1] offsets,
                   const uint8_t[::1] valid, int64_t n, object indices=None):
    """The buffers of an Arrow binary / utf8 array over the n values of a decoded bytes
    column: `offsets` holds n + 1 uint32 offsets into `arena` (non-decreasing, from 0, as
    the decoder writes them), `valid` a byte a value (0 = null).

    Returns (validity bitmap or None, null count, offsets, values). Without `indices` the
    decoder's offsets and arena already are the array's (offsets and values come back None:
    use them as they are). With `indices` (int32 or int64, -1 = null) output row i holds
    value indices[i]: Arrow's take fused into the one copy it needs.
    """
    if offsets.shape[0] < (n + 1) * 4 or valid.shape[0] < n:
        raise ValueError("gather_strings: n exceeds the offsets or validity")
    cdef const uint32_t* off = <const uint32_t*>&offsets[0]
    cdef int64_t size = arena.shape[0]
    if indices is None:
        if off[0] != 0 or off[n] > size:
            raise ValueError("gather_strings: offsets outside the arena")
        if off[n] > 0x7FFFFFFF:
            raise OverflowError("a string column exceeds 2 GiB in one batch: use smaller batches")
        packed, zeros = pack_bits(valid, n)
        return (packed if zeros else None), zeros, None, None
    # Row indices come as int32 (the usual row table) or int64 (very large batches).
    cdef const int32_t[::1] idx32
    cdef const int64_t[::1] idx64
    cdef const int32_t* i32 = NULL
    cdef const int64_t* i64 = NULL
    cdef int64_t rows
    if indices.dtype.itemsize == 4:
        idx32 = indices
        rows = idx32.shape[0]
        i32 = &idx32[0] if rows > 0 else NULL
    else:
        idx64 = indices
        rows = idx64.shape[0]
        i64 = &idx64[0] if rows > 0 else NULL
    cdef const uint8_t* ok = &valid[0] if n > 0 else NULL
    cdef int64_t i, k, total = 0, nulls = 0, bad = -1
    with nogil:
        for i in range(rows):
            k = i32[i] if i32 != NULL else i64[i]
            if k < 0 or (k < n and not ok[k]):
                nulls += 1
                continue
            if k >= n or off[k] > off[k + 1] or off[k + 1] > size:
                bad = i
                break
            total += off[k + 1] - off[k]
    if bad >= 0:
        raise ValueError("gather_strings: an offset or index points outside the data")
    if total > 0x7FFFFFFF:
        raise OverflowError("a string column exceeds 2 GiB in one batch: use smaller batches")
    cdef int64_t offsets_alloc = 0, out_alloc = 0, bitmap_alloc = 0
    cdef int32_t* out_off = <int32_t*>pool_alloc((rows + 1) * sizeof(int32_t), False,
                                                 &offsets_alloc)
    cdef uint8_t* out = pool_alloc(total, False, &out_alloc)
    cdef uint8_t* bitmap = pool_alloc((rows + 7) // 8 + 1, False, &bitmap_alloc) if nulls else NULL
    if out_off == NULL or out == NULL or (nulls and bitmap == NULL):
        pool_free(<uint8_t*>out_off, offsets_alloc)
        pool_free(out, out_alloc)
        pool_free(bitmap, bitmap_alloc)
        raise MemoryError()
    cdef const uint8_t* src = &arena[0] if size > 0 else NULL
    with nogil:
        if nulls:
            memset(bitmap, 0, (rows + 7) // 8 + 1)
        if nulls:
            for i in range(rows):
                k = i32[i] if i32 != NULL else i64[i]
                if k >= 0 and ok[k]:
                    bitmap[i >> 3] |= 1 << (i & 7)
        copy_strings(src, off, n, i32, i64, rows, ok, NULL, out_off, out)
    return (OwnedBuffer.adopt(bitmap, (rows + 7) // 8, bitmap_alloc) if nulls else None, nulls,
            OwnedBuffer.adopt(<uint8_t*>out_off, (rows + 1) * sizeof(int32_t), offsets_alloc),
            OwnedBuffer.adopt(out, total, out_alloc))


def epoch_values(const uint8_t[::1] seconds, const uint8_t[::1] nanos, object seconds_valid,
                 object nanos_valid, int64_t n, int64_t per):
    """The values of an Arrow timestamp / duration column from a Timestamp's or Duration's
    decoded parts, in one pass without the GIL (instead of a chain of compute calls).

    seconds: n int64 slots, nanos: n int32 slots (the decoder's buffers); *_valid: their
    validity bytes, or None when every slot is valid; per: units per second (1 .. 10**9).
    A value is seconds * per + nanos // (10**9 // per), truncated toward zero. Returns
    (values, bitmap, nulls, lost): a slot is null where either part is, or where the
    seconds lie beyond what the unit can hold (those records are rejected before; slots no
    row reads are nulled); lost counts valid nanos that are not whole units (truncated).
    """
    if not (0 <= n and seconds.shape[0] >= n * 8 and nanos.shape[0] >= n * 4
            and 1 <= per <= 1_000_000_000 and 1_000_000_000 % per == 0):
        raise ValueError("epoch_values: inputs do not match n / per")
    cdef const uint8_t[::1] sv = seconds_valid if seconds_valid is not None else None
    cdef const uint8_t[::1] nv = nanos_valid if nanos_valid is not None else None
    if (sv is not None and sv.shape[0] < n) or (nv is not None and nv.shape[0] < n):
        raise ValueError("epoch_values: validity shorter than n")
    cdef int64_t nbytes = (n + 7) // 8, values_alloc, bitmap_alloc
    cdef int64_t* out = <int64_t*>pool_alloc(max(n, 1) * 8, False, &values_alloc)
    cdef uint8_t* bits = pool_alloc(max(nbytes, 1), False, &bitmap_alloc)
    if out == NULL or bits == NULL:
        pool_free(<uint8_t*>out, values_alloc)
        pool_free(bits, bitmap_alloc)
        raise MemoryError()
    cdef const int64_t* s = <const int64_t*>&seconds[0] if n > 0 else NULL
    cdef const int32_t* ns = <const int32_t*>&nanos[0] if n > 0 else NULL
    cdef const uint8_t* s_ok = &sv[0] if sv is not None and n > 0 else NULL
    cdef const uint8_t* n_ok = &nv[0] if nv is not None and n > 0 else NULL
    cdef int64_t step = 1_000_000_000 // per
    cdef int64_t limit = (<int64_t>0x7FFFFFFFFFFFFFFF - 1_000_000_000) // per
    cdef int64_t i, nulls = 0, lost = 0, sec
    cdef bint ok, nano_ok
    with nogil:
        memset(bits, 0, <size_t>max(nbytes, 1))
        for i in range(n):
            sec = s[i]
            nano_ok = n_ok == NULL or n_ok[i] != 0
            if nano_ok and step > 1 and ns[i] % step != 0:
                lost += 1
            ok = nano_ok and (s_ok == NULL or s_ok[i] != 0) and -limit <= sec <= limit
            if ok:
                out[i] = sec * per + ns[i] // step  # cdivision: C's truncation
                bits[i >> 3] |= <uint8_t>(1 << (i & 7))
            else:
                out[i] = 0
                nulls += 1
    values = OwnedBuffer.adopt(<uint8_t*>out, n * 8, values_alloc)
    if nulls == 0:
        pool_free(bits, bitmap_alloc)
        return values, None, 0, lost
    return values, OwnedBuffer.adopt(bits, nbytes, bitmap_alloc), nulls, lost



def epoch_outside(const uint8_t[::1] seconds, const uint8_t[::1] nanos, object seconds_valid,
                  object nanos_valid, object present, int64_t n, int64_t per, bint duration):
    """The elements whose Timestamp / Duration cannot be a value of the column's unit, in
    one pass without the GIL (numpy's dozen passes over the batch held it): returns
    (out_of_range, bad_nanos), int64 element indices of present values (`present`: the
    message's validity bytes, None = every element) whose seconds lie beyond what the
    unit holds, and whose nanos are outside 0..999,999,999 (a Timestamp) or outside
    -999,999,999..999,999,999 or of another sign than the seconds (a Duration). A part
    that did not come counts as 0."""
    if not (0 <= n and seconds.shape[0] >= n * 8 and nanos.shape[0] >= n * 4
            and 1 <= per <= 1_000_000_000):
        raise ValueError("epoch_outside: inputs do not match n / per")
    cdef const uint8_t[::1] sv = seconds_valid if seconds_valid is not None else None
    cdef const uint8_t[::1] nv = nanos_valid if nanos_valid is not None else None
    cdef const uint8_t[::1] pv = present if present is not None else None
    if ((sv is not None and sv.shape[0] < n) or (nv is not None and nv.shape[0] < n)
            or (pv is not None and pv.shape[0] < n)):
        raise ValueError("epoch_outside: validity shorter than n")
    cdef const int64_t* s = <const int64_t*>&seconds[0] if n > 0 else NULL
    cdef const int32_t* ns = <const int32_t*>&nanos[0] if n > 0 else NULL
    cdef const uint8_t* s_ok = &sv[0] if sv is not None and n > 0 else NULL
    cdef const uint8_t* n_ok = &nv[0] if nv is not None and n > 0 else NULL
    cdef const uint8_t* p_ok = &pv[0] if pv is not None and n > 0 else NULL
    cdef int64_t limit = (<int64_t>0x7FFFFFFFFFFFFFFF - 1_000_000_000) // per
    cdef int64_t i, sec, nano, n_range = 0, n_nanos = 0, pass_
    cdef int64_t* out_range = NULL
    cdef int64_t* out_nanos = NULL
    cdef int64_t[::1] r
    cdef int64_t[::1] q
    for pass_ in range(2):
        if pass_ == 1:
            ranges = np.empty(n_range, dtype=np.int64)
            nanos_bad = np.empty(n_nanos, dtype=np.int64)
            if n_range == 0 and n_nanos == 0:
                break
            r = ranges
            q = nanos_bad
            out_range = &r[0] if n_range > 0 else NULL
            out_nanos = &q[0] if n_nanos > 0 else NULL
            n_range = n_nanos = 0
        with nogil:
            for i in range(n):
                if p_ok != NULL and p_ok[i] == 0:
                    continue
                sec = s[i] if s_ok == NULL or s_ok[i] != 0 else 0
                nano = ns[i] if n_ok == NULL or n_ok[i] != 0 else 0
                if sec > limit or sec < -limit:
                    if out_range != NULL:
                        out_range[n_range] = i
                    n_range += 1
                if (nano < -999_999_999 or nano > 999_999_999
                        or (not duration and nano < 0)
                        or (duration and ((sec > 0 and nano < 0) or (sec < 0 and nano > 0)))):
                    if out_nanos != NULL:
                        out_nanos[n_nanos] = i
                    n_nanos += 1
    return ranges, nanos_bad


# ---- whole trees of arrays through the Arrow C data interface ------------------------
#
# A whole-message batch has ~100 arrays (a struct or list per message and repeated field,
# an array per scalar field). Built one pa.Array.from_buffers call at a time, that is
# Python run per array with the GIL held, while another thread's batch waits for it. Here
# one call fills the C ArrowArray structs of every array over the decoder's buffers (no
# copy: the structs point into them and keep them alive until Arrow releases the tree),
# packs the validity bitmaps without the GIL, and pyarrow imports the whole tree at once.


cdef extern from *:
    """
    #ifndef ARROW_C_DATA_INTERFACE
    #define ARROW_C_DATA_INTERFACE
    struct ArrowSchema {
      const char* format; const char* name; const char* metadata; int64_t flags;
      int64_t n_children; struct ArrowSchema** children; struct ArrowSchema* dictionary;
      void (*release)(struct ArrowSchema*); void* private_data;
    };
    struct ArrowArray {
      int64_t length; int64_t null_count; int64_t offset; int64_t n_buffers;
      int64_t n_children; const void** buffers; struct ArrowArray** children;
      struct ArrowArray* dictionary; void (*release)(struct ArrowArray*); void* private_data;
    };
    #endif
    static inline int64_t wa_release_ref(int64_t* refs) {
        return __atomic_sub_fetch(refs, 1, __ATOMIC_ACQ_REL);
    }
    /* Non-NULL for empty buffers: a consumer may read a pointer without checking. */
    static const uint64_t wa_empty_buffer[2] = {0, 0};
    """
    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void** buffers
        ArrowArray** children
        ArrowArray* dictionary
        void (*release)(ArrowArray*) noexcept nogil
        void* private_data
    int64_t wa_release_ref(int64_t* refs) noexcept nogil
    const uint64_t wa_empty_buffer[2]


cdef enum:
    T_FIXED = 0     # [validity, values]: ints and floats, the decoder's slots as they are
    T_BOOL = 1      # [validity, bits]: the decoder's bytes packed
    T_BINARY = 2    # [validity, offsets, data]: the decoder's uint32 offsets and arena
    T_STRUCT = 3    # [validity]; children
    T_LIST = 4      # [validity, int32 offsets]; one child (list or map)
    T_ENTRIES = 5   # a map's entries: struct without validity, children key and value
    T_GIVEN = 6     # built in Python and exported into the tree (enums, JSON, temporal ...)

# Columns of a node in ArrowTree.prog.
cdef enum:
    P_KIND = 0
    P_COLUMN = 1    # values column (T_FIXED / T_BOOL / T_BINARY)
    P_VALID = 2     # column whose validity bytes are the node's, -1: valid everywhere
    P_KEY = 3       # what that validity is shared under (one bitmap per key per batch)
    P_GROUP = 4     # the node's length is this group's element count
    P_OFFSETS = 5   # T_LIST: the group whose list offsets are the node's
    P_CHILD0 = 6    # children: kids[P_CHILD0 : P_CHILD0 + P_NCHILD]
    P_NCHILD = 7
    P_BYTES = 8     # T_FIXED: bytes per value
    P_WIDTH = 9


ctypedef struct Tree:
    # One block per imported batch: every node's struct, buffer and child pointers, the
    # bitmaps packed for it, and the Python objects (decoder buffers) it points into.
    int64_t refs            # nodes not yet released (a consumer may move children out)
    PyObject* owners
    ArrowArray* nodes
    const void** bufs
    ArrowArray** kids
    uint8_t** bitmaps       # packed here, given back to the pool with the tree
    int64_t* bitmap_alloc
    int64_t n_bitmaps
    uint8_t* zeros          # the offsets of lists whose elements' group is empty
    int64_t zeros_alloc


cdef void tree_free(Tree* t) noexcept nogil:
    cdef int64_t i
    # (At interpreter exit the owners are left: Python objects cannot be freed then.)
    if t.owners != NULL and Py_IsInitialized():
        with gil:
            Py_DECREF(<object>t.owners)
    for i in range(t.n_bitmaps):
        pool_free(t.bitmaps[i], t.bitmap_alloc[i])
    pool_free(t.zeros, t.zeros_alloc)
    PyMem_RawFree(t.nodes)
    PyMem_RawFree(t.bufs)
    PyMem_RawFree(t.kids)
    PyMem_RawFree(t.bitmaps)
    PyMem_RawFree(t.bitmap_alloc)
    PyMem_RawFree(t)


cdef void release_node(ArrowArray* a) noexcept nogil:
    # Children first (those exported by pyarrow have their own release); the block goes
    # when the last of its nodes is released, whichever thread releases it.
    cdef Tree* t = <Tree*>a.private_data
    cdef int64_t i
    cdef ArrowArray* child
    for i in range(a.n_children):
        child = a.children[i]
        if child.release != NULL:
            child.release(child)
    a.release = NULL
    if wa_release_ref(&t.refs) == 0:
        tree_free(t)


cdef inline const uint8_t* buffer_of(object obj, list owners) except? NULL:
    """The bytes behind a decoder buffer (or any buffer), kept alive by `owners`: the
    objects given here (OwnedBuffer, pa.Buffer, numpy) keep their memory while alive."""
    cdef Py_buffer view
    cdef const uint8_t* p
    owners.append(obj)
    if type(obj) is OwnedBuffer:
        p = (<OwnedBuffer>obj).data
    else:
        PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
        p = <const uint8_t*>view.buf if view.len > 0 else NULL
        PyBuffer_Release(&view)
    return p if p != NULL else <const uint8_t*>wa_empty_buffer


cdef inline int64_t size_of(object obj) except -1:
    cdef Py_buffer view
    cdef int64_t n
    if type(obj) is OwnedBuffer:
        return (<OwnedBuffer>obj).size
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    n = view.len
    PyBuffer_Release(&view)
    return n


ctypedef struct Scratch:
    # What one ArrowTree.build works with besides the tree it hands out: allocated by
    # scratch_alloc, freed in one place (scratch_free) whichever way the call leaves.
    const int64_t* roots    # the nodes built as columns
    int64_t n_roots
    int64_t m               # slots: the nodes the roots can reach
    int64_t n_groups
    int64_t* sizes          # elements per group
    uint8_t* is_given       # per node: 1 given, 2 given and reached (exported last)
    int64_t* gather_rows    # per node: rows gathered (rows=), -1 none; NULL: no rows=
    const uint8_t* state    # per node: ArrowTree.absent's state (3: absent), NULL: none
    int64_t* given_width    # per node: a gathered given array's bytes a value
    int64_t* slot_of        # node -> slot (reached nodes only)
    int64_t* node_at        # slot -> node
    int64_t* stack          # slots still to visit
    int64_t* key_job        # validity key -> its packing job, -1 none yet
    int64_t* node_job       # slot -> its validity bitmap's job, -1 none
    int64_t* bits_job       # slot -> its packed bools' job, -1 none
    const uint8_t** src     # packing jobs: the bytes, how many, how many were 0
    int64_t* src_n
    int64_t* zeros
    int64_t count           # packing jobs planned
    int64_t used            # slots given out
    int64_t kid_top         # child pointers given out


cdef int scratch_alloc(Scratch* s, int64_t n_nodes, int64_t n_cols, int64_t n_groups,
                       bint gather) except -1:
    """s's arrays for a build of s.m slots (s.roots, s.n_roots, s.m set)."""
    cdef int64_t i, m = s.m
    s.n_groups = n_groups
    # (In this order, and freed in the reverse one: glibc's malloc does measurably less
    # work for it, ~1,700 instructions a call on a 4-column fan-out.)
    # Packing jobs, run without the GIL once every pointer is known.
    s.src = <const uint8_t**>PyMem_RawCalloc(2 * m + 1, sizeof(void*))
    s.src_n = <int64_t*>PyMem_RawCalloc(2 * m + 1, sizeof(int64_t))
    s.zeros = <int64_t*>PyMem_RawCalloc(2 * m + 1, sizeof(int64_t))
    s.node_job = <int64_t*>PyMem_RawMalloc((m + 1) * sizeof(int64_t))
    s.bits_job = <int64_t*>PyMem_RawMalloc((m + 1) * sizeof(int64_t))
    s.slot_of = <int64_t*>PyMem_RawMalloc((n_nodes + 1) * sizeof(int64_t))
    s.node_at = <int64_t*>PyMem_RawMalloc((m + 1) * sizeof(int64_t))
    s.key_job = <int64_t*>PyMem_RawMalloc((n_cols + 1) * sizeof(int64_t))
    s.sizes = <int64_t*>PyMem_RawMalloc((n_groups + 1) * sizeof(int64_t))
    s.is_given = <uint8_t*>PyMem_RawCalloc(n_nodes + 1, 1)
    if (s.sizes == NULL or s.is_given == NULL or s.slot_of == NULL or s.node_at == NULL
            or s.key_job == NULL or s.node_job == NULL
            or s.bits_job == NULL or s.src == NULL or s.src_n == NULL or s.zeros == NULL):
        raise MemoryError()
    if gather:
        s.gather_rows = <int64_t*>PyMem_RawMalloc((n_nodes + 1) * sizeof(int64_t))
        s.given_width = <int64_t*>PyMem_RawCalloc(n_nodes + 1, sizeof(int64_t))
        if s.gather_rows == NULL or s.given_width == NULL:
            raise MemoryError()
        for i in range(n_nodes + 1):
            s.gather_rows[i] = -1
    s.stack = <int64_t*>PyMem_RawMalloc((m + 1) * sizeof(int64_t))
    if s.stack == NULL:
        raise MemoryError()
    for i in range(n_cols + 1):
        s.key_job[i] = -1
    for i in range(m + 1):
        s.node_job[i] = -1
        s.bits_job[i] = -1
    return 0


cdef void scratch_free(Scratch* s) noexcept:
    # (PyMem_RawFree(NULL) does nothing: a partial scratch_alloc is freed the same way.)
    PyMem_RawFree(s.stack)
    PyMem_RawFree(s.gather_rows)
    PyMem_RawFree(s.given_width)
    PyMem_RawFree(s.sizes)
    PyMem_RawFree(<void*>s.src)
    PyMem_RawFree(s.src_n)
    PyMem_RawFree(s.zeros)
    PyMem_RawFree(s.node_job)
    PyMem_RawFree(s.bits_job)
    PyMem_RawFree(s.key_job)
    PyMem_RawFree(s.node_at)
    PyMem_RawFree(s.slot_of)
    PyMem_RawFree(s.is_given)


cdef Tree* tree_new(int64_t m, int64_t n_roots, list owners) except NULL:
    """The block of a batch's m nodes and its root (freed by tree_free, or by the release
    of its last node once imported), holding `owners` (the Python objects it points into)."""
    cdef Tree* t = <Tree*>PyMem_RawCalloc(1, sizeof(Tree))
    if t == NULL:
        raise MemoryError()
    t.owners = <PyObject*>owners
    Py_INCREF(owners)
    t.nodes = <ArrowArray*>PyMem_RawCalloc(m + 1, sizeof(ArrowArray))
    t.bufs = <const void**>PyMem_RawCalloc(3 * (m + 1), sizeof(void*))
    t.kids = <ArrowArray**>PyMem_RawCalloc(m + n_roots + 1, sizeof(ArrowArray*))
    # Blocks: a bitmap per validity key and bool node, three per gathered root.
    t.bitmaps = <uint8_t**>PyMem_RawCalloc(2 * m + 3 * n_roots + 1, sizeof(uint8_t*))
    t.bitmap_alloc = <int64_t*>PyMem_RawCalloc(2 * m + 3 * n_roots + 1, sizeof(int64_t))
    if (t.nodes == NULL or t.bufs == NULL or t.kids == NULL or t.bitmaps == NULL
            or t.bitmap_alloc == NULL):
        tree_free(t)
        raise MemoryError()
    return t


cdef int pack_bitmaps(Tree* t, Scratch* s) except -1:
    """Bitmap packing: each job's bytes packed into a tree block (allocated with the GIL,
    the pool's lock being light; packed without), then each node's validity bitmap (or
    none: no nulls), its null count and its packed bools."""
    cdef int64_t job, slot
    cdef ArrowArray* a
    for job in range(s.count):
        t.bitmaps[job] = pool_alloc((s.src_n[job] + 7) // 8 + 1, False, &t.bitmap_alloc[job])
        t.n_bitmaps = job + 1
        if t.bitmaps[job] == NULL:
            raise MemoryError()
    with nogil:
        for job in range(s.count):
            s.zeros[job] = pack_into(s.src[job], s.src_n[job], t.bitmaps[job])
    for slot in range(s.used):
        a = &t.nodes[slot]
        if a.release != release_node:
            continue
        job = s.node_job[slot]
        if job >= 0 and s.zeros[job] > 0:
            a.buffers[0] = t.bitmaps[job]
            a.null_count = s.zeros[job]
        if s.bits_job[slot] >= 0:
            a.buffers[1] = t.bitmaps[s.bits_job[slot]]
    return 0


cdef class ArrowTree:
    """A plan's whole-column arrays as a program of nodes, built per batch in one call.

    Compiled once per plan (plan/assemble.py): `prog` holds a row of P_* fields per node,
    `kids` the child node ids, `roots` the node of each column built, `schema` their
    types. build() returns the columns as pa.Arrays over the batch's decoder buffers.
    """
    cdef const int64_t[:, ::1] prog
    cdef const int64_t[::1] kids
    cdef const int64_t[::1] roots
    cdef object schema
    cdef object import_batch
    cdef int64_t n_nodes
    cdef int64_t n_kids
    cdef int64_t[::1] subtree   # nodes in each node's subtree, itself included

    def __init__(self, prog, kids, roots, schema, import_batch):
        # import_batch(address, schema): pyarrow's RecordBatch._import_from_c, handed in by
        # the cold path, so that _core itself imports no pyarrow (tests/test_core_isolation).
        self.prog = prog
        self.kids = kids
        self.roots = roots
        self.schema = schema
        self.import_batch = import_batch
        self.n_nodes = self.prog.shape[0]
        self.n_kids = self.kids.shape[0]
        if self.prog.shape[1] != P_WIDTH or len(schema) != self.roots.shape[0]:
            raise ValueError("ArrowTree: program and schema do not match")
        cdef int64_t i, j, node
        for i in range(self.n_nodes):
            if not (0 <= self.prog[i, P_CHILD0] and self.prog[i, P_NCHILD] >= 0
                    and self.prog[i, P_CHILD0] + self.prog[i, P_NCHILD] <= self.n_kids):
                raise ValueError(f"ArrowTree: node {i}'s children outside kids")
        for i in range(self.n_kids):
            if not 0 <= self.kids[i] < self.n_nodes:
                raise ValueError(f"ArrowTree: kid {i} is no node")
        # Subtree sizes, children before parents (depth first; a cycle is refused).
        self.subtree = np.zeros(self.n_nodes, dtype=np.int64)
        cdef uint8_t[::1] seen = np.zeros(self.n_nodes, dtype=np.uint8)  # 1 open, 2 done
        cdef int64_t[::1] stack = np.empty(self.n_nodes + 1, dtype=np.int64)
        cdef int64_t top, start, k
        for start in range(self.n_nodes):
            if seen[start]:
                continue
            stack[0] = start
            top = 1
            while top > 0:
                node = stack[top - 1]
                if seen[node] == 0:
                    seen[node] = 1
                    for j in range(self.prog[node, P_CHILD0],
                                   self.prog[node, P_CHILD0] + self.prog[node, P_NCHILD]):
                        k = self.kids[j]
                        if seen[k] == 1:
                            raise ValueError("ArrowTree: the nodes hold a cycle")
                        if seen[k] == 0:
                            if top > self.n_nodes:
                                raise ValueError("ArrowTree: the nodes hold a cycle")
                            stack[top] = k
                            top += 1
                    continue
                top -= 1
                if seen[node] == 2:
                    continue
                seen[node] = 2
                self.subtree[node] = 1
                for j in range(self.prog[node, P_CHILD0],
                               self.prog[node, P_CHILD0] + self.prog[node, P_NCHILD]):
                    self.subtree[node] += self.subtree[self.kids[j]]

    def absent(self, counts, col_valid, given, int64_t threshold, bint state_only=False):
        """The nested nodes of one batch that are empty (no elements) or null in every slot,
        of a subtree of at least `threshold` nodes (threshold 1: the scalar nodes too, for
        the accelerator, whose arrays of nulls cost less than any node): built from arrays made once per plan
        instead of node by node (a wide recursive plan has thousands of nodes, most of them
        absent from a small batch). `given`: the nodes built in Python (never looked into).

        Returns None when no node is absent, else (mixed, full, absent), int64 node ids:
        mixed, the nodes with an absent node below them, children before parents (their
        arrays are put together from their children's); full, the roots and children of
        mixed nodes with none (build(roots=...) builds them); absent, the roots and children
        of mixed nodes that are absent; and the state of every node, a uint8 array: 0 not
        looked at (inside an absent subtree), 1 built, 2 mixed, 3 absent. state_only: that
        state alone (or None), mixed nodes left as 1 (what build(absent=...) reads)."""
        cdef int64_t n_nodes = self.n_nodes, n_groups = len(counts), n_cols = len(col_valid)
        cdef int64_t n_roots = self.roots.shape[0]
        cdef int64_t i, j, k, node, kind, n, col, top = 0, visited = 0
        cdef const uint8_t* v
        cdef bint gone, any_absent = False
        cdef Py_buffer view
        state_arr = np.zeros(n_nodes, dtype=np.uint8)   # 1 full, 2 mixed, 3 absent
        order_arr = np.empty(n_nodes, dtype=np.int64)   # preorder
        stack_arr = np.empty(n_nodes + 1, dtype=np.int64)
        cdef uint8_t[::1] state = state_arr
        cdef int64_t[::1] order = order_arr
        cdef int64_t[::1] stack = stack_arr
        cdef int64_t[::1] sizes = np.asarray(counts, dtype=np.int64)
        for node in given:
            if not 0 <= node < n_nodes:
                raise ValueError(f"ArrowTree: no node {node}")
            state[node] = 4   # (given: a leaf here)
        for i in range(n_roots):
            stack[top] = self.roots[i]
            top += 1
        while top > 0:
            top -= 1
            node = stack[top]
            kind = self.prog[node, P_KIND]
            j = self.prog[node, P_GROUP]
            if not 0 <= j < n_groups:
                raise ValueError(f"ArrowTree: node {node} in no group")
            n = sizes[j]
            order[visited] = node
            visited += 1
            if state[node] == 4:
                state[node] = 1
                continue
            state[node] = 1
            if kind != T_STRUCT and kind != T_LIST and kind != T_ENTRIES and (
                    threshold > 1 or kind == T_GIVEN):
                continue
            gone = False
            if self.subtree[node] >= threshold:
                gone = n == 0
                col = self.prog[node, P_VALID]
                if not gone and 0 <= col < n_cols:
                    obj = col_valid[col]
                    if type(obj) is OwnedBuffer:
                        if (<OwnedBuffer>obj).size < n:
                            raise ValueError("ArrowTree: validity shorter than its group")
                        v = (<OwnedBuffer>obj).data
                        gone = all_zero(v, n)
                    else:
                        PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
                        try:
                            if view.len < n:
                                raise ValueError("ArrowTree: validity shorter than its group")
                            gone = all_zero(<const uint8_t*>view.buf, n)
                        finally:
                            PyBuffer_Release(&view)
            if gone:
                state[node] = 3
                any_absent = True
                continue
            for j in range(self.prog[node, P_CHILD0], self.prog[node, P_CHILD0] + self.prog[node, P_NCHILD]):
                stack[top] = self.kids[j]
                top += 1
        if state_only:
            return state_arr if any_absent else None
        mixed = []
        for i in range(visited - 1, -1, -1):   # children before parents
            node = order[i]
            if state[node] != 1:
                any_absent = any_absent or state[node] == 3
                continue
            for j in range(self.prog[node, P_CHILD0], self.prog[node, P_CHILD0] + self.prog[node, P_NCHILD]):
                if state[self.kids[j]] >= 2:
                    state[node] = 2
                    mixed.append(node)
                    break
        if not any_absent:
            return None
        full = []
        absent = []
        for i in range(n_roots):
            node = self.roots[i]
            if state[node] == 1:
                full.append(node)
            elif state[node] == 3:
                absent.append(node)
        for node in mixed:
            for j in range(self.prog[node, P_CHILD0], self.prog[node, P_CHILD0] + self.prog[node, P_NCHILD]):
                k = self.kids[j]
                if state[k] == 1:
                    full.append(k)
                elif state[k] == 3:
                    absent.append(k)
        return (np.array(mixed, dtype=np.int64), np.array(full, dtype=np.int64),
                np.array(absent, dtype=np.int64), state_arr)

    cdef int plan_nodes(self, Tree* t, Scratch* s, object col_values, object col_valid,
                        object col_arena, dict list_offsets, dict given,
                        list owners) except -1:
        """Job planning: every node reached from the roots, without descending into a given
        node, gets a slot, its struct filled with the decoder's buffers, and its validity
        and bool bytes a packing job (one job per validity key). The stack holds slots (a
        node reached twice would get two: never read as the same)."""
        cdef int64_t i, j, k, node, n, job, kind, col, slot
        cdef const uint32_t* off
        cdef ArrowArray* a
        for i in range(s.n_roots):
            s.slot_of[s.roots[i]] = s.used
            s.node_at[s.used] = s.roots[i]
            s.stack[i] = s.used
            s.used += 1
        k = s.n_roots
        while k > 0:
            k -= 1
            slot = s.stack[k]
            node = s.node_at[slot]
            kind = self.prog[node, P_KIND]
            a = &t.nodes[slot]
            j = self.prog[node, P_GROUP]
            if not 0 <= j < s.n_groups:
                raise ValueError(f"ArrowTree: node {node} in no group")
            n = s.sizes[j]
            a.length = n
            a.buffers = &t.bufs[3 * slot]
            a.private_data = <void*>t
            if s.gather_rows != NULL and s.gather_rows[node] >= 0:
                a.length = s.gather_rows[node]  # buffers: gathered below
                a.n_buffers = 3 if kind == T_BINARY else 2
                a.release = release_node
                t.refs += 1
                continue
            if kind == T_GIVEN or s.is_given[node]:
                arr = given[node]
                if len(arr) != n:
                    raise AssertionError(f"ArrowTree: node {node} given {len(arr)} values, not {n}")
                owners.append(arr)
                s.is_given[node] = 2  # (reached: exported into slot_of[node] below)
                continue  # exported below, once nothing can fail any more
            a.release = release_node
            t.refs += 1
            if s.state != NULL and s.state[node] == 3:
                # Absent (null in every slot, or none): no buffers and no children, for
                # the taker (build's into=) to put its array of nulls here.
                a.null_count = n
                continue
            col = self.prog[node, P_VALID]
            if col >= 0:
                job = s.key_job[self.prog[node, P_KEY]]
                if job < 0:
                    job = s.count
                    s.count += 1
                    s.key_job[self.prog[node, P_KEY]] = job
                    valid = col_valid[col]
                    if size_of(valid) < n:
                        raise ValueError("ArrowTree: validity shorter than its group")
                    s.src[job] = buffer_of(valid, owners)
                    s.src_n[job] = n
                s.node_job[slot] = job
            if kind == T_FIXED:
                a.n_buffers = 2
                values = col_values[self.prog[node, P_COLUMN]]
                if size_of(values) < n * self.prog[node, P_BYTES]:
                    raise ValueError("ArrowTree: values shorter than their group")
                a.buffers[1] = buffer_of(values, owners)
            elif kind == T_BOOL:
                a.n_buffers = 2
                values = col_values[self.prog[node, P_COLUMN]]
                if size_of(values) < n:
                    raise ValueError("ArrowTree: bool values shorter than their group")
                s.src[s.count] = buffer_of(values, owners)
                s.src_n[s.count] = n
                s.bits_job[slot] = s.count  # its buffer: the packed bits, below
                s.count += 1
            elif kind == T_BINARY:
                a.n_buffers = 3
                col = self.prog[node, P_COLUMN]
                values = col_values[col]
                if size_of(values) < (n + 1) * 4:
                    raise ValueError("ArrowTree: offsets shorter than their group")
                off = <const uint32_t*>buffer_of(values, owners)
                arena = col_arena[col]
                if off[0] != 0 or off[n] > (size_of(arena) if arena is not None else 0):
                    raise ValueError("ArrowTree: offsets outside the arena")
                if off[n] > 0x7FFFFFFF:
                    raise OverflowError(
                        "a string column exceeds 2 GiB in one batch: use smaller batches")
                a.buffers[1] = off
                a.buffers[2] = (buffer_of(arena, owners) if arena is not None
                                else <const uint8_t*>wa_empty_buffer)
            elif kind == T_LIST:
                a.n_buffers = 2
                j = self.prog[node, P_OFFSETS]
                offsets = list_offsets.get(j)
                if offsets is None and 0 <= j < s.n_groups and s.sizes[j] == 0:
                    # No elements: every list is empty, its offsets zeros.
                    if t.zeros == NULL:
                        t.zeros = pool_alloc((max_size(s.sizes, s.n_groups) + 1) * 4, True,
                                             &t.zeros_alloc)
                        if t.zeros == NULL:
                            raise MemoryError()
                    a.buffers[1] = t.zeros
                else:
                    if offsets is None:
                        raise KeyError(f"ArrowTree: no list offsets of group {j}")
                    if size_of(offsets) < (n + 1) * 4:
                        raise ValueError("ArrowTree: list offsets shorter than their group")
                    a.buffers[1] = buffer_of(offsets, owners)
            else:  # T_STRUCT, T_ENTRIES
                a.n_buffers = 1
            a.n_children = self.prog[node, P_NCHILD]
            if s.used + a.n_children > s.m:  # (subtree sizes bound the slots)
                raise ValueError("ArrowTree: the nodes are not a tree")
            a.children = &t.kids[s.kid_top]
            s.kid_top += a.n_children
            for j in range(a.n_children):
                i = self.kids[self.prog[node, P_CHILD0] + j]
                s.slot_of[i] = s.used
                s.node_at[s.used] = i
                a.children[j] = &t.nodes[s.used]
                s.stack[k] = s.used
                k += 1
                s.used += 1
        return 0

    cdef int plan_gathers(self, Scratch* s, object rows, object drops,
                          dict given) except -1:
        """Roots gathered at their row table (rows=): how many rows each (-1: none, or a
        table 0 .. n-1, the node as it is), and a given root's bytes a value."""
        cdef int64_t i, j, node, kind
        if len(rows) != s.n_roots or (drops is not None and len(drops) != s.n_roots):
            raise ValueError("ArrowTree: rows= and drops= need one entry a root")
        for i in range(s.n_roots):
            table = rows[i]
            if table is None:
                continue
            node = s.roots[i]
            kind = self.prog[node, P_KIND]
            if kind == T_GIVEN or s.is_given[node]:
                s.given_width[node] = fixed_width_of(given.get(node))
                if s.given_width[node] <= 0:
                    raise ValueError(
                        f"ArrowTree: rows= for given node {node}, not a fixed-width array")
            elif kind not in (T_FIXED, T_BOOL, T_BINARY):
                raise ValueError(f"ArrowTree: rows= for node {node}, not a scalar")
            j = self.prog[node, P_GROUP]
            if not 0 <= j < s.n_groups:
                raise ValueError(f"ArrowTree: node {node} in no group")
            # 0 .. n-1 (a fan-out that added no rows here): the node as it is.
            if not table_is_identity(table, s.sizes[j]):
                s.gather_rows[node] = len(table)
        return 0

    cdef int gather_root(self, Tree* t, Scratch* s, int64_t i, object table,
                         object col_values, object col_valid, object col_arena,
                         dict given) except -1:
        """Gathering: root i's values at its row table, into pooled tree blocks of its own;
        its sources are held (refs) only while it is gathered."""
        cdef int64_t node = s.roots[i], rows = s.gather_rows[node]
        cdef int64_t kind = self.prog[node, P_KIND], width = self.prog[node, P_BYTES]
        cdef int64_t n = s.sizes[self.prog[node, P_GROUP]], col, nbytes, g_status
        cdef const uint8_t* g_values
        cdef const uint8_t* g_valid = NULL
        cdef const uint8_t* g_bitmap = NULL
        cdef int64_t g_first = 0
        cdef const uint8_t* g_arena = <const uint8_t*>wa_empty_buffer
        cdef int64_t g_arena_size = 0
        cdef const int32_t* g32 = NULL
        cdef const int64_t* g64 = NULL
        refs = []
        if s.given_width[node] > 0:
            # A fixed-width array built in Python (a Timestamp's epoch values):
            # gathered as a T_FIXED column whose validity is its bitmap.
            arr = given[node]
            if len(arr) != n:
                raise AssertionError(
                    f"ArrowTree: node {node} given {len(arr)} values, not {n}")
            kind = T_FIXED
            width = s.given_width[node]
            g_first = arr.offset
            validity, values = arr.buffers()
            if size_of(values) < (g_first + n) * width:
                raise ValueError("ArrowTree: values shorter than their group")
            g_values = buffer_of(values, refs) + g_first * width
            if validity is not None and arr.null_count:
                if size_of(validity) * 8 < g_first + n:
                    raise ValueError("ArrowTree: validity shorter than its group")
                g_bitmap = buffer_of(validity, refs)
            arr = validity = None
        else:
            col = self.prog[node, P_COLUMN]
            values = col_values[col]
            nbytes = (n + 1) * 4 if kind == T_BINARY else n * width
            if kind == T_BOOL:
                nbytes = n
            if size_of(values) < nbytes:
                raise ValueError("ArrowTree: values shorter than their group")
            g_values = buffer_of(values, refs)
            if self.prog[node, P_VALID] >= 0:
                valid = col_valid[self.prog[node, P_VALID]]
                if size_of(valid) < n:
                    raise ValueError("ArrowTree: validity shorter than its group")
                g_valid = buffer_of(valid, refs)
            if kind == T_BINARY and col_arena[col] is not None:
                g_arena = buffer_of(col_arena[col], refs)
                g_arena_size = size_of(col_arena[col])
        refs.append(table)
        if table.dtype.itemsize == 4:
            g32 = <const int32_t*>buffer_of(table, refs)
        else:
            g64 = <const int64_t*>buffer_of(table, refs)
        with nogil:
            g_status = gather_into(t, &t.nodes[i], kind, width, g_values, g_valid,
                                   g_bitmap, g_first, g_arena, g_arena_size, n,
                                   g32, g64, rows)
        refs = values = valid = table = None
        if g_status == G_MEMORY:
            raise MemoryError()
        if g_status == G_INDEX:
            raise ValueError("ArrowTree: a row table points outside its group")
        if g_status == G_OFFSETS:
            raise ValueError("ArrowTree: an offset points outside the arena")
        if g_status == G_OVERFLOW:
            raise OverflowError(
                "a string column exceeds 2 GiB in one batch: use smaller batches")
        return 0

    cdef ArrowArray* export(self, Tree* t, Scratch* s, int64_t root_len,
                            dict given) except NULL:
        """Export: the root, a struct of the columns (returned, for the caller to import
        as a record batch with our schema); the given arrays exported into their slots
        last (once exported they belong to the tree, so nothing may fail before)."""
        cdef int64_t i, slot, m = s.m
        cdef ArrowArray* a = &t.nodes[m]
        a.length = root_len if root_len >= 0 else 0
        a.n_buffers = 1
        a.buffers = &t.bufs[3 * m]
        a.n_children = s.n_roots
        a.children = &t.kids[s.kid_top]
        for i in range(s.n_roots):
            a.children[i] = &t.nodes[i]
        a.private_data = <void*>t
        a.release = release_node
        t.refs += 1
        for node, arr in given.items():
            if s.is_given[node] == 2:  # reached: its slot (exported once)
                s.is_given[node] = 1
                slot = s.slot_of[node]
                if t.nodes[slot].private_data != NULL and t.nodes[slot].release == NULL:
                    arr._export_to_c(<uintptr_t>&t.nodes[slot])
        return a

    def build(self, col_values, col_valid, col_arena, counts, dict list_offsets,
              dict given, rows=None, drops=None, roots=None, schema=None,
              absent=None, into=None):
        """The root columns of one batch. Result_*: the decoder Result's col_values,
        col_valid and col_arena lists; counts: elements per group; list_offsets: group ->
        int32 offsets buffer of each list group; given: node -> pa.Array for the nodes
        built in Python (T_GIVEN, or any node given instead, e.g. a map deduplicated).

        rows (a fan-out's columns): per root, None or its row table, an int32 / int64
        array (row -> element of the root's group, -1: none, a null row); such a root,
        scalar only (T_FIXED / T_BOOL / T_BINARY, or a given fixed-width array: a
        Timestamp's epoch values), is its values gathered at those rows into buffers of
        its own (no copy when the table is 0 .. n-1), Arrow's take done without the GIL.
        drops: per root, the decoder columns to let go of (set to None in
        the three lists) once that root is gathered: their last reader, so that a batch's
        peak memory holds the buffers of the columns still to come only. A list given as
        rows has each entry let go of (set to None) once its root is built, for the same.
        A gathered root's buffers are tree blocks from the pool (values and bitmap of a
        fixed or bool root in one), back to the pool when Arrow releases the tree.
        roots and schema: build these nodes (int64 ids, all of one length) as the columns,
        with this schema, instead of the program's roots (see absent()).
        into: instead of importing the tree through pyarrow, return into.take(address) of
        its root (the accelerator's TreeArrays: Arrow ArrayData made from the structs
        directly), which takes the tree over (releases it).
        absent (with into= only): absent()'s state of every node (a uint8 array); the
        nodes in state 3 are left without buffers or children (null_count = length), for
        `into` to put an array of nulls in their place: the whole tree in one call, the
        absent subtrees not walked.
        """
        cdef const int64_t[::1] root_ids = self.roots if roots is None else roots
        if roots is not None and (schema is None or len(schema) != root_ids.shape[0]):
            raise ValueError("ArrowTree: roots= needs a schema= of one field a root")
        for r in root_ids:
            if not 0 <= r < self.n_nodes:
                raise ValueError(f"ArrowTree: no node {r}")
        cdef int64_t n_nodes = self.n_nodes, n_roots = root_ids.shape[0]
        cdef const uint8_t[::1] state
        if absent is not None:
            if into is None:
                raise ValueError("ArrowTree: absent= needs into= (no array import takes it)")
            state = absent
            if state.shape[0] != n_nodes:
                raise ValueError("ArrowTree: absent= needs one state a node")
        # Every struct and scratch array below is sized by the nodes these roots can reach
        # (their subtrees), not by the plan: a wide recursive plan has ~18,000 nodes, of
        # which a small batch builds a few hundred at a time (absent()). A reached node
        # gets the next slot; slot_of / node_at translate (only reached nodes are read).
        cdef int64_t m = 0, r_at
        if absent is not None:
            # The nodes absent() looked at (none inside an absent subtree): this call
            # reaches those only (plan_nodes refuses to go past m slots).
            if roots is not None:
                raise ValueError("ArrowTree: absent= builds the program's roots")
            for r_at in range(n_nodes):
                m += 1 <= state[r_at] <= 3  # (4: a given node not reached)
        else:
            for r_at in range(n_roots):
                m += self.subtree[root_ids[r_at]]
        cdef Scratch s
        memset(&s, 0, sizeof(Scratch))
        s.roots = &root_ids[0] if n_roots > 0 else NULL
        s.n_roots = n_roots
        s.m = m
        s.state = &state[0] if absent is not None and n_nodes > 0 else NULL
        cdef ArrowArray* root
        cdef int64_t i, n, col, root_len = -1
        owners = []
        cdef Tree* t = tree_new(m, n_roots, owners)
        try:
            try:
                scratch_alloc(&s, n_nodes, len(col_valid), len(counts), rows is not None)
                for i in range(s.n_groups):
                    s.sizes[i] = counts[i]
                for i in given:
                    if not 0 <= i < n_nodes:
                        raise ValueError(f"ArrowTree: no node {i}")
                    s.is_given[i] = 1
                if rows is not None:
                    self.plan_gathers(&s, rows, drops, given)
                self.plan_nodes(t, &s, col_values, col_valid, col_arena, list_offsets,
                                given, owners)
                for i in range(n_roots):
                    n = t.nodes[i].length
                    if root_len >= 0 and n != root_len:
                        raise AssertionError("ArrowTree: columns of different lengths")
                    root_len = n
                pack_bitmaps(t, &s)
                # Gathered roots, in the caller's order, each root's last-read decoder
                # columns dropped right after it.
                for i in range(n_roots if rows is not None else 0):
                    if s.gather_rows[s.roots[i]] >= 0:
                        self.gather_root(t, &s, i, rows[i], col_values, col_valid,
                                         col_arena, given)
                    if type(rows) is list:
                        rows[i] = None  # (its last reference, when the caller kept no other)
                    if drops is not None:
                        for col in drops[i]:
                            col_values[col] = None
                            col_valid[col] = None
                            col_arena[col] = None
            except BaseException:
                tree_free(t)
                raise
            root = self.export(t, &s, root_len, given)
        finally:  # the scratch, whichever way the call leaves
            scratch_free(&s)
        if into is not None:
            return into.take(<uintptr_t>root)
        return self.import_batch(<uintptr_t>root, self.schema if schema is None else schema).columns



def copy_entries(list values, const int64_t[::1] into, const int64_t[::1] source):
    """values[into[i]] = values[source[i]] for each i, in order (assembly's shared validity:
    thousands of list entries a call on a wide plan, ~10x the Python loop's cost)."""
    cdef Py_ssize_t i, n = len(values)
    if into.shape[0] != source.shape[0]:
        raise ValueError("copy_entries: into and source differ in length")
    for i in range(into.shape[0]):
        if not (0 <= into[i] < n and 0 <= source[i] < n):
            raise IndexError("copy_entries: an index outside the list")
        values[into[i]] = values[source[i]]

cdef int64_t max_size(const int64_t* sizes, int64_t n) noexcept nogil:
    cdef int64_t i, m = 0
    for i in range(n):
        m = max(m, sizes[i])
    return m


cdef bint all_zero(const uint8_t* p, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if p[i]:
            return False
    return True


cdef void copy_strings(const uint8_t* arena, const uint32_t* off, int64_t n,
                       const int32_t* i32, const int64_t* i64, int64_t rows,
                       const uint8_t* valid, const uint8_t* bitmap, int32_t* out_off,
                       uint8_t* out) noexcept nogil:
    """Row i of out / out_off (Arrow binary layout) is value i32[i] / i64[i] of the n
    values at off into arena, empty where the row is null: no element (< 0), a 0 byte in
    `valid`, or (given instead) a 0 bit in the row's `bitmap`. Bounds checked by the caller."""
    cdef int64_t i, k, kp, pos = 0
    cdef bint present
    out_off[0] = 0
    for i in range(rows):
        # Rows pick values all over the arena: ask for the one PREFETCH rows ahead so
        # that its cache miss overlaps this copy.
        if i + PREFETCH < rows:
            kp = i32[i + PREFETCH] if i32 != NULL else i64[i + PREFETCH]
            if 0 <= kp < n:
                __builtin_prefetch(arena + off[kp])
        k = i32[i] if i32 != NULL else i64[i]
        if bitmap != NULL:
            present = (bitmap[i >> 3] >> (i & 7)) & 1
        else:
            present = k >= 0 and valid[k] != 0
        if present:
            if off[k + 1] > off[k]:
                memcpy(out + pos, arena + off[k], off[k + 1] - off[k])
                pos += off[k + 1] - off[k]
        out_off[i + 1] = <int32_t>pos


cdef int64_t fixed_width_of(object arr) except -2:
    """Bytes a value of a pyarrow array of a fixed-width type (int, float, timestamp,
    duration, date, time: a validity bitmap and one values buffer); 0 for any other."""
    if arr is None:
        return 0
    try:
        bits = arr.type.bit_width
    except (ValueError, AttributeError):  # (nested, variable-width, dictionary types)
        return 0
    if bits % 8 or bits == 0 or arr.type.num_buffers != 2:
        return 0
    return bits // 8


cdef bint table_is_identity(object table, int64_t n) except -1:
    """Whether a row table (int32 / int64) is 0, 1, ..., n - 1."""
    cdef const int32_t[::1] t32
    cdef const int64_t[::1] t64
    cdef int64_t i, rows = len(table)
    cdef bint same = rows == n
    if not same or rows == 0:
        return same
    if table.dtype.itemsize == 4:
        t32 = table
        with nogil:
            for i in range(rows):
                if t32[i] != i:
                    same = False
                    break
    else:
        t64 = table
        with nogil:
            for i in range(rows):
                if t64[i] != i:
                    same = False
                    break
    return same


cdef enum:
    G_OK = 0
    G_MEMORY = 1
    G_INDEX = 2
    G_OFFSETS = 3
    G_OVERFLOW = 4


cdef uint8_t* tree_block(Tree* t, int64_t size) noexcept nogil:
    """A pooled block freed with the tree (NULL when out of memory)."""
    cdef uint8_t* p = pool_alloc(size, False, &t.bitmap_alloc[t.n_bitmaps])
    if p != NULL:
        t.bitmaps[t.n_bitmaps] = p
        t.n_bitmaps += 1
    return p


cdef int64_t gather_into(Tree* t, ArrowArray* a, int64_t kind, int64_t width,
                         const uint8_t* values, const uint8_t* valid, const uint8_t* valid_bits,
                         int64_t first, const uint8_t* arena, int64_t arena_size, int64_t n,
                         const int32_t* i32, const int64_t* i64, int64_t rows) noexcept nogil:
    """Node `a` (its length already `rows`) as its n-element scalar column read at rows
    i32 / i64 (-1: null): Arrow's take of the column at the row table, into tree blocks.
    values: T_FIXED slots of `width` bytes, T_BOOL bytes, T_BINARY n + 1 uint32 offsets
    into arena; valid: a byte an element, or valid_bits: an Arrow bitmap whose bit first + k
    is element k's (both NULL: every element valid)."""
    cdef int64_t i, k, nulls = 0, total = 0, nbits = (rows + 7) // 8 + 1, vbytes
    cdef const uint32_t* off = <const uint32_t*>values
    cdef uint8_t* bitmap
    cdef uint8_t* out = NULL
    cdef int32_t* out_off
    if kind == T_BINARY:
        bitmap = tree_block(t, nbits)
    else:
        # A fixed or bool root's values, then its bitmap at the next 64-byte boundary, in
        # one pooled block. (These went to Arrow's pool, mimalloc, as its take puts them:
        # on two threads mimalloc purged them between batches (madvise) and the next batch
        # faulted them in again: 83% of a flat-4 65k batch's faults; benchmarks/README.md,
        # "Threads".)
        vbytes = ((rows * width if kind == T_FIXED else nbits) + 63) & ~63
        out = tree_block(t, vbytes + nbits)
        bitmap = out + vbytes if out != NULL else NULL
    if bitmap == NULL:
        return G_MEMORY
    memset(bitmap, 0, nbits)
    for i in range(rows):
        k = i32[i] if i32 != NULL else i64[i]
        if k >= n:
            return G_INDEX
        if k < 0 or (valid != NULL and not valid[k]) or (
                valid_bits != NULL and not (valid_bits[(first + k) >> 3] >> ((first + k) & 7)) & 1):
            nulls += 1
            continue
        bitmap[i >> 3] |= <uint8_t>(1 << (i & 7))
        if kind == T_BINARY:
            if off[k] > off[k + 1] or off[k + 1] > arena_size:
                return G_OFFSETS
            total += off[k + 1] - off[k]
    a.null_count = nulls
    a.buffers[0] = bitmap if nulls else NULL
    if kind == T_FIXED:
        if width == 8:
            for i in range(rows):
                k = i32[i] if i32 != NULL else i64[i]
                (<uint64_t*>out)[i] = ((<const uint64_t*>values)[k]
                                       if (bitmap[i >> 3] >> (i & 7)) & 1 else 0)
        elif width == 4:
            for i in range(rows):
                k = i32[i] if i32 != NULL else i64[i]
                (<uint32_t*>out)[i] = ((<const uint32_t*>values)[k]
                                       if (bitmap[i >> 3] >> (i & 7)) & 1 else 0)
        else:
            for i in range(rows):
                k = i32[i] if i32 != NULL else i64[i]
                if (bitmap[i >> 3] >> (i & 7)) & 1:
                    memcpy(out + i * width, values + k * width, width)
                else:
                    memset(out + i * width, 0, width)
        a.buffers[1] = out
    elif kind == T_BOOL:
        memset(out, 0, nbits)
        for i in range(rows):
            k = i32[i] if i32 != NULL else i64[i]
            if (bitmap[i >> 3] >> (i & 7)) & 1 and values[k]:
                out[i >> 3] |= <uint8_t>(1 << (i & 7))
        a.buffers[1] = out
    else:
        if total > 0x7FFFFFFF:
            return G_OVERFLOW
        out_off = <int32_t*>tree_block(t, (rows + 1) * sizeof(int32_t))
        out = tree_block(t, total)
        if out_off == NULL or out == NULL:
            return G_MEMORY
        copy_strings(arena, off, n, i32, i64, rows, NULL, bitmap, out_off, out)
        a.buffers[1] = out_off
        a.buffers[2] = out
    return G_OK


cdef int64_t pack_into(const uint8_t* src, int64_t n, uint8_t* out) noexcept nogil:
    """n bytes (0 / non-zero) -> an LSB-first bitmap at out; returns how many were 0."""
    cdef int64_t i, j, nbytes = (n + 7) // 8, ones = 0
    cdef uint8_t byte
    for i in range(n // 8):
        byte = 0
        for j in range(8):
            byte |= (src[i * 8 + j] != 0) << j
        out[i] = byte
        ones += popcount8(byte)
    if n % 8:
        byte = 0
        i = n // 8
        for j in range(n % 8):
            byte |= (src[i * 8 + j] != 0) << j
        out[i] = byte
        ones += popcount8(byte)
    return n - ones
