#pragma once

#include <QJsonObject>
#include <QList>
#include <QWidget>

class QComboBox;
class QSpinBox;
class QTableWidget;

namespace dlion::ui {

// "This computer (emulated micro-cloud)": how many local workers, each
// one's compute slowdown, and the link caps between them, from a preset
// (the engine's lan / lan-hetero / wan / wan-hetero) or an edited matrix.
class LocalClusterForm : public QWidget {
    Q_OBJECT
public:
    explicit LocalClusterForm(QWidget *parent = nullptr);

    int workers() const;
    void setWorkers(int n);
    QList<double> slowdown() const;  // unparsable cells read as 0 (invalid)
    void setSlowdown(int worker, double factor);
    QString linkPreset() const;      // "none", a preset name, or "custom"
    void setLinkPreset(const QString &preset);
    // The caps in Mbit/s (0 = uncapped), as the engine will apply them.
    QList<QList<double>> capMatrix() const;
    void setCap(int from, int to, double mbps);
    QJsonObject emulation() const;
    // Seconds the agents train on after DLion Studio closes (0: they end with it).
    int graceS() const;
    void setGraceS(int s);

    // Marks invalid cells in place; returns the first problem, empty if none.
    QString validate();
    // Marks the field named by a job error ("slowdown", "workers",
    // "emulation..."); returns whether it is one of this form's fields.
    bool markField(const QString &field, const QString &message);
    void clearMarks();

Q_SIGNALS:
    void changed();

private:
    void resizeTables();
    void fillPreset();

    QSpinBox *m_workers;
    QTableWidget *m_slowdown;
    QComboBox *m_preset;
    QTableWidget *m_matrix;
    QSpinBox *m_grace;
    bool m_filling = false;
};

} // namespace dlion::ui
