#pragma once

#include <QList>
#include <QtGlobal>

namespace dlion::core {

// An (x, y) series that keeps at most the latest `2 * capacity` points and at
// least the latest `capacity` once that many arrived: old points are dropped
// in blocks so appending stays amortized O(1). `total()` counts every point
// ever appended, so a view can add only what is new since it last looked.
class BoundedSeries {
public:
    explicit BoundedSeries(qsizetype capacity = 2048);

    void append(double x, double y);
    void clear();

    qsizetype size() const { return m_x.size(); }
    bool isEmpty() const { return m_x.isEmpty(); }
    qint64 total() const { return m_total; }
    // Index (in the count of all points ever appended) of the oldest held point.
    qint64 firstIndex() const { return m_total - m_x.size(); }
    double x(qsizetype i) const { return m_x[i]; }
    double y(qsizetype i) const { return m_y[i]; }
    double lastY(double fallback = 0) const { return m_y.isEmpty() ? fallback : m_y.constLast(); }
    qsizetype capacity() const { return m_capacity; }

private:
    qsizetype m_capacity;
    QList<double> m_x;
    QList<double> m_y;
    qint64 m_total = 0;
};

} // namespace dlion::core
