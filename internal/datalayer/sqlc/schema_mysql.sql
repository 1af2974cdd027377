CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL, CONSTRAINT non_negative CHECK (balance >= 0));
