#include "link_presets.h"

namespace dlion::protocol {

const QStringList &linkPresetNames()
{
    static const QStringList names = {"lan", "lan-hetero", "wan", "wan-hetero", "none"};
    return names;
}

QList<double> linkPresetRates(const QString &name)
{
    if (name == QLatin1String("lan"))
        return {800};
    if (name == QLatin1String("lan-hetero"))
        return {800, 400, 200};
    if (name == QLatin1String("wan"))
        return {40};
    if (name == QLatin1String("wan-hetero"))
        return {40, 20, 10};
    if (name == QLatin1String("none"))
        return {0};
    return {};
}

double linkPresetLatencyMs(const QString &name)
{
    // Typical one-way delays, not measurements: a switched LAN adds 0.1 to
    // 0.2 ms; sites in different cities, or neighbouring regions of a
    // public cloud as in geo-distributed training (Gaia, NSDI'17), see
    // round trips of 40 to 80 ms, so 20 to 40 ms one way.
    if (name.startsWith(QLatin1String("lan")))
        return 0.2;
    if (name.startsWith(QLatin1String("wan")))
        return 25;
    return 0;
}

double linkPresetCap(const QList<double> &rates, int from, int to)
{
    return from == to || rates.isEmpty() ? 0 : rates[(from + to) % rates.size()];
}

} // namespace dlion::protocol
