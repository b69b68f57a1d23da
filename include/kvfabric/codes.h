/* kvfabric's status codes, task states and op codes, declared once.
 *
 * Each list is a macro that applies X to one row per value:
 *
 *   X(number, Name, C_NAME, "meaning")
 *
 * and everything else is generated from these rows:
 *
 *   KVF_STATUS_CODES  the failure codes of kvfabric::Status. C++:
 *                     Status::Code::k<Name> = number, Status::<Name>("...")
 *                     builds one, Status::CodeName gives "<Name>". C
 *                     (kvfabric.h): KVF_<C_NAME> = -number, kvf_code_name
 *                     gives "<Name>". Python (kvfabric.errors): one exception
 *                     class per row with .code == number, checked against
 *                     _core.status_codes() when the engine loads.
 *                     Success is not a row: 0, Status::Code::kOk, KVF_OK, "OK".
 *   KVF_TASK_STATES   the state of a request or a batch. C++: TaskState::k<Name>,
 *                     TaskStateName gives "<C_NAME>". C: KVF_<C_NAME> = number.
 *                     Python: kvfabric.TaskState.<C_NAME>.
 *   KVF_OP_CODES      what a request does. C++: OpCode::k<Name>. C:
 *                     KVF_<C_NAME> = number. Python: kvfabric.OpCode.<C_NAME>.
 *
 * The numbers are ABI (the C API returns the negated status code, Python
 * users see .code, the Mooncake shim hands op codes through): never change or
 * reuse one; add new rows at the end. A new row also needs, and the tests ask
 * for, its line in the released numbers of src/common/status_test.cc and in
 * the tables of docs/python.md; a new status code its Python class in
 * kvfabric/errors.py (the engine's import fails without it).
 *
 * This header is C and C++ alike; kvfabric.h, kvfabric/status.h and
 * kvfabric/engine.h include it. */
#ifndef KVFABRIC_CODES_H_
#define KVFABRIC_CODES_H_

#define KVF_STATUS_CODES(X)                                                                  \
  X(1, InvalidArgument, EINVAL, "bad input from the caller; nothing was changed")            \
  X(2, NotFound, ENOTFOUND, "unknown segment, buffer, batch or peer")                        \
  X(3, OutOfRange, ERANGE, "a local or remote range outside registered memory")              \
  X(4, Busy, EBUSY, "the object still has work in flight")                                   \
  X(5, Timeout, ETIMEOUT, "a deadline passed")                                               \
  X(6, FabricError, EFABRIC, "libfabric failed the operation itself (bad key or address)")   \
  X(7, NetworkError, ENETWORK, "a peer could not be reached, or was lost with work in flight") \
  X(8, ProtocolError, EPROTOCOL, "a peer sent a malformed message")                          \
  X(9, Unavailable, EUNAVAILABLE, "the provider or feature is absent on this machine")       \
  X(10, Internal, EINTERNAL, "a bug in kvfabric: please report it with the message")         \
  X(11, PermissionDenied, EPERM, "the peer refused this engine (auth token), or WRITE into read-only memory") \
  X(12, Closed, ECLOSED, "the engine is closed, or is a forked child's copy of its parent's")

#define KVF_TASK_STATES(X)                                                                   \
  X(0, Pending, PENDING, "submitted and not ended yet")                                      \
  X(1, Completed, COMPLETED, "every byte moved")                                             \
  X(2, Failed, FAILED, "ended with an error, which its status carries")                      \
  X(3, Timeout, TIMEOUT, "its deadline (KVF_TRANSFER_TIMEOUT_MS) passed first")

#define KVF_OP_CODES(X)                                                                      \
  X(0, Read, READ, "copy the target's memory into local memory")                             \
  X(1, Write, WRITE, "copy local memory into the target's memory")

#endif /* KVFABRIC_CODES_H_ */
