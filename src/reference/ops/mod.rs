//! (CPU oracle for ops: being written.)
