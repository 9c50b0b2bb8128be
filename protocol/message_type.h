#pragma once

#include <cstdint>

namespace dlion::protocol {

// Wire version; a peer with another version is refused at the handshake.
// 2: one session key per direction (1 had one for both).
// 3: a large message may span several frames (FrameCodec::kMoreFlag).
// 4: the workers' data plane has a Delivered message (engine/mailbox.h),
//    which a version-3 worker would take for a malformed frame.
// 5: the workers' data plane (engine/mailbox.h): a header has a word for
//    a control row riding at the end of its payload (8 words where 4 had
//    7), bodies go into a receive posted ahead, Delivered has a tag of its
//    own and Bye carries one word.
// 6: the workers' data plane keeps two header and two body receives
//    posted ahead, and its link emulator charges what that lets through;
//    a version-5 worker keeps one of each, so the charges would not match.
// 7: a DLion payload's header word carries the batch growth its share was
//    computed at and the growth its sender proposes.
// 8: ... and whether its sender proposes pipelined rounds.
inline constexpr std::uint8_t kProtocolVersion = 8;

enum class MessageType : std::uint16_t {
    // Handshake (see handshake.h).
    Hello = 1,     // agent -> controller: {version, nonce, agent}
    Auth = 2,      // controller -> agent: {nonce, proof}
    AuthOk = 3,    // agent -> controller: {proof}
    // Control.
    Job = 10,      // controller -> agent: JobSpec
    Command = 11,  // controller -> agent: {cmd, ...}; {cmd: "ack", seq} acknowledges Telemetry up to seq
    Status = 12,   // agent -> controller: {state, message}
    Telemetry = 13,  // agent -> controller: {seq, rounds: [...], evals: [...], merges: [...]}; re-sent until acked
    Finished = 14,   // agent -> controller: {ok, message, ..., model_info, model}; the model may span frames
    Error = 15,      // either way: {message}
    Heartbeat = 16,  // either way: {}
};

bool isKnownMessageType(std::uint16_t value);
const char *messageTypeName(MessageType type);

} // namespace dlion::protocol
