#pragma once

#include <QByteArray>

// HMAC challenge-response between a controller and an agent sharing a per-run
// secret. The agent sends a fresh nonce (Hello); the controller answers with
// its own nonce and a proof over both (Auth); the agent checks it and proves
// itself back (AuthOk). Neither side sends the secret. Both then derive two
// session keys, one per direction, that authenticate every later frame: a
// frame reflected back to its sender fails its MAC. Nonces are fresh per
// connection, so a recorded Auth cannot be replayed on another.
namespace dlion::protocol::handshake {

inline constexpr int kNonceSize = 32;
// The shortest secret an agent accepts: 128 bits as hex (makeSecret gives 256).
inline constexpr int kMinSecretSize = 32;

QByteArray makeNonce();
QByteArray controllerProof(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce);
QByteArray agentProof(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce);
QByteArray agentToControllerKey(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce);
QByteArray controllerToAgentKey(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce);
// Constant-time comparison.
bool equal(const QByteArray &a, const QByteArray &b);
// A random secret for a run: 256 bits, hex-encoded (safe on a command line or
// in a file).
QByteArray makeSecret();

} // namespace dlion::protocol::handshake
