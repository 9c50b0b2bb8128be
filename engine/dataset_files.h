#pragma once
// Readers for the dataset formats users have: an image folder, a CSV table
// and NumPy .npy arrays. Torch-free (the image folder uses Qt's image
// readers), so they compile fast and tests link them alone. Each throws
// EngineError naming the file and what to do.
#include "dataset_source.h"

#include <string>
#include <vector>

namespace dlion::engine {

// `dir/<class>/*.png|jpg|jpeg|bmp|pgm|ppm`. Labels: the class folder's index
// in `classNames`, or, when that is empty, in the sorted folder names. Every
// image must have the first one's size (nothing is resized); grey first
// image: one channel, else three (RGB, alpha dropped), later images converted.
RawDataset readImageFolder(const std::string &dir, const std::vector<std::string> &classNames);

// A CSV table with a header row: the column named "label" holds whole class
// ids, every other column a numeric feature. Samples are (1, 1, features).
RawDataset readCsvTable(const std::string &path, const std::vector<std::string> &classNames);

// `x`: uint8 or float32/float64 of shape (N, H, W), (N, C, H, W) or (N, F);
// `y`: integer labels of shape (N). Version 1 to 3 headers, C order.
RawDataset readNpyPair(const std::string &xPath, const std::string &yPath, const std::vector<std::string> &classNames);

} // namespace dlion::engine
