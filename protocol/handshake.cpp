#include "handshake.h"

#include <QMessageAuthenticationCode>
#include <QRandomGenerator>

namespace dlion::protocol::handshake {

namespace {
QByteArray hmac(const QByteArray &secret, const char *label, const QByteArray &a, const QByteArray &b)
{
    QMessageAuthenticationCode code(QCryptographicHash::Sha256, secret);
    code.addData(label);
    code.addData(a);
    code.addData(b);
    return code.result();
}

QByteArray randomBytes(int n)
{
    QByteArray out(n, Qt::Uninitialized);
    auto *gen = QRandomGenerator::system();
    for (int i = 0; i < n; ++i)
        out[i] = char(gen->bounded(256));
    return out;
}
} // namespace

QByteArray makeNonce() { return randomBytes(kNonceSize); }

QByteArray makeSecret() { return randomBytes(32).toHex(); }

QByteArray controllerProof(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce)
{
    return hmac(secret, "dlion-controller", agentNonce, controllerNonce);
}

QByteArray agentProof(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce)
{
    return hmac(secret, "dlion-agent", controllerNonce, agentNonce);
}

QByteArray agentToControllerKey(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce)
{
    return hmac(secret, "dlion-session-agent-to-controller", agentNonce, controllerNonce);
}

QByteArray controllerToAgentKey(const QByteArray &secret, const QByteArray &agentNonce, const QByteArray &controllerNonce)
{
    return hmac(secret, "dlion-session-controller-to-agent", agentNonce, controllerNonce);
}

bool equal(const QByteArray &a, const QByteArray &b)
{
    if (a.size() != b.size())
        return false;
    unsigned char diff = 0;
    for (qsizetype i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

} // namespace dlion::protocol::handshake
