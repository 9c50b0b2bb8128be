#include "round_series_codec.h"

#include <QtEndian>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace dlion::core::roundseries {

namespace {

constexpr char kMagic[2] = {'R', '1'};
constexpr int kFixedReals = 6;  // share, rate, computeS, commS, loss, slowdown

void putVarint(QByteArray &out, quint64 v)
{
    while (v >= 0x80) {
        out.append(char(v | 0x80));
        v >>= 7;
    }
    out.append(char(v));
}

quint64 zigzag(qint64 v) { return (quint64(v) << 1) ^ quint64(v >> 63); }
qint64 unzigzag(quint64 v) { return qint64(v >> 1) ^ -qint64(v & 1); }

class Reader {
public:
    explicit Reader(const QByteArray &b) : m_data(b) {}
    bool ok() const { return m_ok; }
    quint64 varint()
    {
        quint64 v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (m_pos >= m_data.size())
                break;
            const auto byte = quint8(m_data[m_pos++]);
            v |= quint64(byte & 0x7f) << shift;
            if (!(byte & 0x80))
                return v;
        }
        m_ok = false;
        return 0;
    }
    const char *take(qsizetype n)
    {
        if (n < 0 || m_pos + n > m_data.size()) {
            m_ok = false;
            return nullptr;
        }
        const char *p = m_data.constData() + m_pos;
        m_pos += n;
        return p;
    }
    bool atEnd() const { return m_pos == m_data.size(); }

private:
    const QByteArray &m_data;
    qsizetype m_pos = 0;
    bool m_ok = true;
};

// Real-valued series in the order they are stored: the fixed fields, then
// link j's Mbps and fraction for every record that has a link j.
std::vector<quint32> gatherReals(const QList<protocol::RoundRecord> &rounds, qsizetype from, qsizetype to,
                                 size_t maxLinks)
{
    std::vector<quint32> bits;
    auto push = [&](double d) { bits.push_back(std::bit_cast<quint32>(float(d))); };
    // Link estimates are noisy measurements: 16 significant bits (relative
    // error below 2e-5) is far beyond their accuracy, and halves their size.
    auto pushLink = [&](double d) {
        quint32 b = std::bit_cast<quint32>(float(d));
        if (std::isfinite(float(d)))
            b = (b + 0x40) & ~quint32(0x7f);
        bits.push_back(b);
    };
    for (int f = 0; f < kFixedReals; ++f) {
        for (qsizetype i = from; i < to; ++i) {
            const auto &r = rounds[i];
            const double v[kFixedReals] = {r.share, r.rate, r.computeS, r.commS, r.loss, r.slowdown};
            push(v[f]);
        }
    }
    for (size_t j = 0; j < maxLinks; ++j) {
        for (qsizetype i = from; i < to; ++i) {
            if (j < rounds[i].linkMbps.size())
                pushLink(rounds[i].linkMbps[j]);
        }
        for (qsizetype i = from; i < to; ++i) {
            if (j < rounds[i].linkFraction.size())
                pushLink(rounds[i].linkFraction[j]);
        }
    }
    return bits;
}

} // namespace

QByteArray encode(const QList<protocol::RoundRecord> &rounds, qsizetype from, qsizetype to)
{
    QByteArray raw;
    raw.append(kMagic, 2);
    const qsizetype n = to - from;
    putVarint(raw, quint64(n));
    qint64 prev[4] = {0, 0, 0, 0};
    bool digests = false;
    size_t maxLinks = 0;
    for (int c = 0; c < 4; ++c) {
        for (qsizetype i = from; i < to; ++i) {
            const auto &r = rounds[i];
            const qint64 v[4] = {r.round, std::llround(r.t * 1e6), r.batch, r.bytesSent};
            putVarint(raw, zigzag(v[c] - prev[c]));
            prev[c] = v[c];
            digests = digests || r.paramDigest != 0;
            maxLinks = std::max({maxLinks, r.linkMbps.size(), r.linkFraction.size()});
        }
    }
    raw.append(char(digests ? 1 : 0));
    if (digests) {
        for (qsizetype i = from; i < to; ++i) {
            const quint64 d = qToLittleEndian(rounds[i].paramDigest);
            raw.append(reinterpret_cast<const char *>(&d), 8);
        }
    }
    for (qsizetype i = from; i < to; ++i) {
        putVarint(raw, rounds[i].linkMbps.size());
        putVarint(raw, rounds[i].linkFraction.size());
    }
    // XOR with the previous value of the same series, then byte planes.
    std::vector<quint32> bits = gatherReals(rounds, from, to, maxLinks);
    quint32 last = 0;
    for (quint32 &b : bits) {
        const quint32 x = b ^ last;
        last = b;
        b = x;
    }
    const qsizetype planeStart = raw.size();
    raw.resize(planeStart + qsizetype(bits.size()) * 4);
    for (int plane = 0; plane < 4; ++plane) {
        char *dst = raw.data() + planeStart + plane * qsizetype(bits.size());
        for (size_t k = 0; k < bits.size(); ++k)
            dst[k] = char((bits[k] >> (8 * (3 - plane))) & 0xff);
    }
    return qCompress(raw, 6);
}

bool decode(const QByteArray &blob, int worker, QList<protocol::RoundRecord> *out, QString *error)
{
    auto fail = [error](const QString &why) {
        if (error)
            *error = QStringLiteral("malformed round series: ") + why;
        return false;
    };
    const QByteArray raw = qUncompress(blob);
    if (raw.size() < 3 || std::memcmp(raw.constData(), kMagic, 2) != 0)
        return fail(QStringLiteral("bad header"));
    Reader in(raw);
    in.take(2);
    const quint64 n = in.varint();
    if (!in.ok() || n > quint64(raw.size()))
        return fail(QStringLiteral("bad record count"));
    QList<protocol::RoundRecord> recs;
    recs.resize(qsizetype(n));
    qint64 prev[4] = {0, 0, 0, 0};
    for (int c = 0; c < 4; ++c) {
        for (auto &r : recs) {
            prev[c] += unzigzag(in.varint());
            switch (c) {
            case 0: r.round = prev[c]; break;
            case 1: r.t = double(prev[c]) / 1e6; break;
            case 2: r.batch = int(prev[c]); break;
            default: r.bytesSent = prev[c]; break;
            }
        }
    }
    const char *flag = in.take(1);
    if (!flag)
        return fail(QStringLiteral("truncated"));
    if (*flag) {
        for (auto &r : recs) {
            const char *p = in.take(8);
            if (!p)
                return fail(QStringLiteral("truncated digests"));
            quint64 d;
            std::memcpy(&d, p, 8);
            r.paramDigest = qFromLittleEndian(d);
        }
    }
    size_t maxLinks = 0, reals = size_t(n) * kFixedReals;
    for (auto &r : recs) {
        const quint64 nb = in.varint(), nf = in.varint();
        if (!in.ok() || nb > 4096 || nf > 4096)
            return fail(QStringLiteral("bad link count"));
        r.linkMbps.resize(nb);
        r.linkFraction.resize(nf);
        maxLinks = std::max({maxLinks, size_t(nb), size_t(nf)});
        reals += nb + nf;
    }
    const char *planes = in.take(qsizetype(reals) * 4);
    if (!in.ok() || !planes || !in.atEnd())
        return fail(QStringLiteral("bad value block"));
    std::vector<quint32> bits(reals);
    quint32 last = 0;
    for (size_t k = 0; k < reals; ++k) {
        quint32 x = 0;
        for (int plane = 0; plane < 4; ++plane)
            x |= quint32(quint8(planes[plane * reals + k])) << (8 * (3 - plane));
        last ^= x;
        bits[k] = last;
    }
    size_t k = 0;
    auto next = [&] { return double(std::bit_cast<float>(bits[k++])); };
    for (int f = 0; f < kFixedReals; ++f) {
        for (auto &r : recs) {
            double *fields[kFixedReals] = {&r.share, &r.rate, &r.computeS, &r.commS, &r.loss, &r.slowdown};
            *fields[f] = next();
        }
    }
    for (size_t j = 0; j < maxLinks; ++j) {
        for (auto &r : recs) {
            if (j < r.linkMbps.size())
                r.linkMbps[j] = next();
        }
        for (auto &r : recs) {
            if (j < r.linkFraction.size())
                r.linkFraction[j] = next();
        }
    }
    for (auto &r : recs)
        r.worker = worker;
    out->append(recs);
    return true;
}

} // namespace dlion::core::roundseries
