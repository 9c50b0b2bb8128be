#include "bounded_series.h"

namespace dlion::core {

BoundedSeries::BoundedSeries(qsizetype capacity) : m_capacity(qMax<qsizetype>(1, capacity))
{
    m_x.reserve(2 * m_capacity);
    m_y.reserve(2 * m_capacity);
}

void BoundedSeries::append(double x, double y)
{
    if (m_x.size() >= 2 * m_capacity) {
        m_x.remove(0, m_capacity);
        m_y.remove(0, m_capacity);
    }
    m_x.append(x);
    m_y.append(y);
    ++m_total;
}

void BoundedSeries::clear()
{
    m_x.clear();
    m_y.clear();
    m_total = 0;
}

} // namespace dlion::core
