//! (CPU oracle for attention: being written.)
